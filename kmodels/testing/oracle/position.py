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


def bicubic_resample(grid, new_rows, new_cols, a=-0.75):
    """A `(rows, cols, dim)` grid resampled to `(new_rows, new_cols, dim)`,
    each output pixel from its 4x4 neighbourhood (indices clamped to the
    grid), written pixel by pixel: Keys' (1981) cubic convolution kernel
    with torch's `a = -0.75`, sampled at pixel centres
    (`F.interpolate(mode="bicubic", align_corners=False)`): output pixel
    `i` reads the input at `(i + 0.5) * rows / new_rows - 0.5`.
    """

    def kernel(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    grid = np.asarray(grid, np.float64)
    rows, cols, dim = grid.shape
    out = np.zeros((new_rows, new_cols, dim))
    for i in range(new_rows):
        y = (i + 0.5) * rows / new_rows - 0.5
        for j in range(new_cols):
            x = (j + 0.5) * cols / new_cols - 0.5
            for m in range(int(np.floor(y)) - 1, int(np.floor(y)) + 3):
                for n in range(int(np.floor(x)) - 1, int(np.floor(x)) + 3):
                    weight = kernel(y - m) * kernel(x - n)
                    r = min(max(m, 0), rows - 1)
                    c = min(max(n, 0), cols - 1)
                    out[i, j] += weight * grid[r, c]
    return out
