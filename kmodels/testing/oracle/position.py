import numpy as np


def learned_position_embedding(table, sequence_length, start_index=0):
    """Rows `start_index .. start_index + sequence_length` of a learned table.

    Learned absolute positions (Gehring et al., 2017; Devlin et al., 2019).
    """
    table = np.asarray(table, np.float64)
    if start_index + sequence_length > len(table):
        raise IndexError(
            f"positions up to {start_index + sequence_length} requested; the "
            f"table holds {len(table)}"
        )
    return table[start_index : start_index + sequence_length]


def sine_position_encoding(
    sequence_length, dim, max_wavelength=10000, start_index=0
):
    """Sinusoidal positions of Vaswani et al. (2017), section 3.5.

    PE(p, 2i)   = sin(p / max_wavelength^(2i / dim))
    PE(p, 2i+1) = cos(p / max_wavelength^(2i / dim))
    """
    p = np.arange(start_index, start_index + sequence_length)[:, None]
    i = np.arange(dim)[None, :]
    rate = 1.0 / np.power(float(max_wavelength), (2 * (i // 2)) / dim)
    angle = p * rate
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
