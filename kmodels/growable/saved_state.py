"""Checksums of the state kmodels' layers write to Keras weight stores.

Keras' `.keras` archive and `.weights.h5` files carry no checksum of their
own: a flipped or zeroed run of bytes inside the HDF5 data loads without a
word. `KeyIndex` and `GrowableEmbedding` therefore store, beside their
entries, an entry `"checksum"`: one CRC32 per entry, in a fixed order, each
over the entry's dtype name, shape and bytes. `checked_entries` reads the
entries back and verifies them before a layer changes anything.
"""

import warnings
import zlib

import numpy as np


def _crc32(value):
    value = np.ascontiguousarray(value)
    header = f"{value.dtype.name}{tuple(value.shape)}".encode("ascii")
    return zlib.crc32(value.reshape(-1).view(np.uint8), zlib.crc32(header))


def entry_checksums(entries, names):
    """CRC32 of `entries[name]` for each of `names`, as an int64 array."""
    return np.array([_crc32(entries[name]) for name in names], np.int64)


def checked_entries(store, names, where):
    """Copies `store[name]` for each of `names` into NumPy arrays, after
    checking that they exist and match the store's `"checksum"` entry.

    A store without `"checksum"` (saved before kmodels wrote one) loads
    unverified, with a warning. Raises a `ValueError` that starts with
    `where` (the layer) and names the entry otherwise.
    """
    for name in names:
        if name not in store:
            raise ValueError(
                f"{where}: the saved state has no entry {name!r} (it has "
                f"{sorted(store.keys())}; expected {list(names)}). Was it "
                "saved by a layer with another configuration?"
            )
    entries = {name: np.array(store[name]) for name in names}
    if "checksum" not in store:
        warnings.warn(
            f"{where}: the saved state has no checksum (saved before "
            "kmodels stored one); it is loaded without verification.",
            stacklevel=3,
        )
        return entries
    stored = np.array(store["checksum"])
    if stored.shape != (len(names),) or stored.dtype.kind not in "iu":
        raise ValueError(
            f"{where}: saved entry 'checksum' must hold {len(names)} "
            f"integers (a CRC32 of each of {list(names)}); got shape "
            f"{stored.shape}, dtype {stored.dtype}. The weights file is "
            "corrupted."
        )
    for name, expected in zip(names, stored.tolist()):
        actual = _crc32(entries[name])
        if actual != expected:
            raise ValueError(
                f"{where}: saved entry {name!r} does not match its checksum "
                f"(CRC32 stored {expected:#010x}, computed {actual:#010x} "
                f"over dtype {entries[name].dtype.name}, shape "
                f"{entries[name].shape} and bytes). The weights file is "
                "corrupted."
            )
    return entries
