"""Maps arbitrary keys (int64 ids, strings) to dense rows of a table."""

import itertools

import keras
import numpy as np

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.backend.common.keyed_saved_model import key_table
from kmodels.layers.saved_state import checked_entries
from kmodels.layers.saved_state import entry_checksums

_KEY_DTYPES = ("int64", "string")
# Batch sizes from which `KeyIndex.lookup` first reduces a batch to its
# distinct keys; below, one dict lookup per key is faster (measured: string
# keys cost a hash and a set insertion each to deduplicate).
_DEDUPLICATE_FROM = {"int64": 8192, "string": 65536}
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


@keras.saving.register_keras_serializable(package="kmodels")
class KeyIndex(keras.layers.Layer):
    """Maps raw keys (int64 ids like `10**12`, product codes) to dense rows.

    A data-pipeline companion of `GrowableEmbedding`: `lookup(keys)` returns
    NumPy int64 rows, assigning the next free row to each new key (rows
    `first_row, first_row + 1, ...` in order of arrival), so the table it
    feeds grows with the keys. `freeze()` stops that for serving: unknown
    keys then map to `oov_row`, or raise a `KeyError` when `oov_row` is
    `None`. Attach it to a table (`GrowableEmbedding(..., key_index=index)`)
    and it is saved and loaded with the model (`.keras` and weights files).
    It runs on NumPy, outside the compiled model, on every backend.

    `lookup` checks the whole batch before it assigns any row, so a refused
    batch adds no key: int64 keys must be integers in `[-2**63, 2**63)`
    (Python or NumPy ints, or an integer NumPy array; a `uint64` key
    `>= 2**63` is refused), string keys `str` encodable as UTF-8 (a lone
    surrogate such as `"\\ud800"` is refused) or UTF-8 `bytes`. A wrong
    type raises a `TypeError`, a value that could not be saved a
    `ValueError`: every key an index holds can be saved.

    The saved keys carry a CRC32 checksum per entry; loading verifies it
    and the keys' structure (lengths, duplicates, UTF-8) before it
    replaces anything, and raises a `ValueError` naming the layer and the
    entry otherwise (files saved without checksums load unverified, with a
    warning).

    Args:
        key_dtype: `"int64"` or `"string"`.
        first_row: int >= 0. Row of the first key; rows below it are
            reserved (row 0 for padding with `mask_zero=True`, or for
            unknown keys).
        oov_row: int or `None`. Row of unknown keys once frozen; a reserved
            row, below `first_row` (or 0 when `first_row=0`).
        frozen: bool. Start frozen.
        **kwargs: other `keras.layers.Layer` arguments (`name`).

    Example:

    ```python
    index = kmodels.layers.KeyIndex("string")
    index.lookup(["sku-9", "sku-2", "sku-9"])  # array([1, 2, 1])
    index.freeze()
    index.lookup(["sku-7"])  # array([0]): the reserved unknown row
    ```
    """

    def __init__(
        self,
        key_dtype="int64",
        first_row=1,
        oov_row=0,
        frozen=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        key_dtype = check_choice(
            key_dtype, "key_dtype", "KeyIndex", _KEY_DTYPES
        )
        first_row = check_int(first_row, "first_row", "KeyIndex", minimum=0)
        oov_row = check_optional_int(oov_row, "oov_row", "KeyIndex", minimum=0)
        if oov_row is not None and not oov_row < max(first_row, 1):
            raise ValueError(
                "KeyIndex: `oov_row` must be a reserved row in [0, "
                f"first_row={first_row}); got {oov_row}."
            )
        self.key_dtype = key_dtype
        self.first_row = first_row
        self.oov_row = oov_row
        self.frozen = check_bool(frozen, "frozen", "KeyIndex")
        self._set_rows({})
        self.built = True

    def _set_rows(self, rows):
        # A plain dict: Keras would wrap an attribute dict in a TrackedDict,
        # which inspects every value it stores.
        object.__setattr__(self, "_rows", rows)

    def __len__(self):
        return len(self._rows)

    @property
    def num_rows(self):
        """Rows in use: `first_row + number of keys`."""
        return self.first_row + len(self._rows)

    def freeze(self):
        """Stops assigning rows: unknown keys map to `oov_row` (or raise)."""
        self.frozen = True

    def unfreeze(self):
        self.frozen = False

    # ---------------------------------------------------------------- lookup
    def _refuse(self, error, key, position, expected):
        # `str` of NumPy numbers: their `repr` differs across NumPy versions.
        shown = repr(key) if isinstance(key, (str, bytes)) else str(key)
        raise error(
            f"KeyIndex '{self.name}' has {expected}; got "
            f"{type(key).__name__} {shown} at position {position} of the "
            "batch (flattened). No key of this batch was added."
        )

    def _int_keys(self, keys):
        """The batch as a flat int64 NumPy array, or raises."""
        if keys.dtype.kind in "iu":
            flat = keys.reshape(-1)
            if flat.size and flat.dtype.kind == "u":
                top = flat.argmax()
                if int(flat[top]) > _INT64_MAX:
                    self._refuse(
                        ValueError,
                        flat[top],
                        int(top),
                        "int64 keys, in [-2**63, 2**63)",
                    )
            return flat.astype(np.int64, copy=False)
        raw = flat = keys.reshape(-1).tolist()
        # `set(map(type, ...))` checks every key at C speed; the loop below
        # only runs to name the first bad key or to convert NumPy ints.
        if not set(map(type, raw)) <= {int}:
            for i, key in enumerate(raw):
                if isinstance(key, (bool, np.bool_)) or not isinstance(
                    key, (int, np.integer)
                ):
                    self._refuse(TypeError, key, i, "int64 keys")
            flat = [int(key) for key in raw]
        return self._int64(flat, raw)

    def _int64(self, flat, raw):
        """`flat`, a list of Python ints (`raw` as given), as an int64
        array, or raises."""
        try:
            return np.array(flat, dtype=np.int64).reshape(-1)
        except OverflowError:
            for i, key in enumerate(flat):
                if not _INT64_MIN <= key <= _INT64_MAX:
                    self._refuse(
                        ValueError, raw[i], i, "int64 keys, in [-2**63, 2**63)"
                    )
            raise

    def _string_keys(self, keys):
        """The batch as a list of `str` encodable as UTF-8, or raises."""
        flat = keys.reshape(-1).tolist()
        if not set(map(type, flat)) <= {str}:
            for i, key in enumerate(flat):
                if isinstance(key, bytes):
                    try:
                        flat[i] = key.decode("utf-8")
                    except UnicodeDecodeError:
                        self._refuse(
                            ValueError, key, i, "string keys (UTF-8 bytes)"
                        )
                elif isinstance(key, str):
                    flat[i] = str(key)
                else:
                    self._refuse(TypeError, key, i, "string keys")
        return self._utf8(flat)

    def _utf8(self, flat):
        """`flat`, a list of `str`, if UTF-8 can encode every one."""
        try:
            "".join(flat).encode("utf-8")
        except UnicodeEncodeError:
            for i, key in enumerate(flat):
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    self._refuse(
                        ValueError,
                        key,
                        i,
                        "string keys encodable as UTF-8 (no lone surrogates)",
                    )
        return flat

    def lookup(self, keys, grow=None):
        """Rows of `keys` (any shape) as an int64 NumPy array.

        The whole batch is checked first: a refused batch (a `TypeError`
        for a key of the wrong type, a `ValueError` for an int64 key out
        of range or a string not encodable as UTF-8, a `KeyError` for an
        unknown key of a frozen index without `oov_row`) adds no key.

        New keys get rows in order of first appearance in the flattened
        batch. The work per key runs in NumPy and C, not in Python loops:
        a long batch (8,192 int64 keys, 65,536 strings or more) is first
        reduced to its distinct keys with a NumPy sort (of the keys, or of
        the strings' hashes), so only those reach the index's dict.

        Args:
            keys: array-like of keys.
            grow: bool or `None`. Assign rows to new keys; `None` means
                "unless frozen". `grow=True` on a frozen index raises.

        Returns:
            An int64 NumPy array of the shape of `keys`.

        Example:

        ```python
        index = kmodels.layers.KeyIndex("int64")
        index.lookup([[10**12, 7], [7, 3]])  # array([[1, 2], [2, 3]])
        ```
        """
        if grow is None:
            grow = not self.frozen
        if grow and self.frozen:
            raise ValueError(f"KeyIndex '{self.name}' is frozen.")
        shape, flat = self._checked_keys(keys)
        if len(flat) >= _DEDUPLICATE_FROM[self.key_dtype]:
            if self.key_dtype == "string":
                grouped = _distinct_strings(flat)
            else:
                grouped = _distinct_ints(flat)
            if grouped is not None:
                distinct, first, inverse = grouped
                found = self._rows_of(distinct, first, grow, True)
                return found[inverse].reshape(shape)
        if self.key_dtype == "int64":
            flat = flat.tolist()
        found = self._rows_of(flat, np.arange(len(flat)), grow, False)
        return found.reshape(shape)

    def _checked_keys(self, keys):
        """`(shape, flat)` of a batch: its shape and its keys, checked, as
        a flat int64 array or a list of `str`; or raises."""
        plain = str if self.key_dtype == "string" else int
        if type(keys) is list and set(map(type, keys)) <= {plain}:
            # A flat list of plain keys needs no NumPy object array.
            if plain is str:
                return (len(keys),), self._utf8(keys)
            return (len(keys),), self._int64(keys, keys)
        if not isinstance(keys, np.ndarray) or keys.dtype.kind == "b":
            keys = np.asarray(keys, dtype=object)
        if self.key_dtype == "string":
            return keys.shape, self._string_keys(keys)
        return keys.shape, self._int_keys(keys)

    def _rows_of(self, keys, first, grow, distinct):
        """Rows of `keys`, a list of checked keys of a batch (all of them,
        or its `distinct` ones) with `first`, the position in the batch of
        each one's first appearance; new keys get rows (when `grow`) in
        order of first appearance."""
        rows = self._rows
        found = np.array(
            list(map(rows.get, keys, itertools.repeat(-1))), np.int64
        ).reshape(-1)
        missing = np.flatnonzero(found < 0)
        if not missing.size:
            return found
        # `first` holds distinct positions: any sort is exact.
        missing = missing[np.argsort(first[missing])]
        new_keys = list(map(keys.__getitem__, missing.tolist()))
        if grow:
            # Only now, with every key checked, does the index change;
            # `dict.fromkeys` keeps the first of repeated keys.
            start = self.first_row + len(rows)
            if distinct:
                stop = start + len(new_keys)
                rows.update(zip(new_keys, range(start, stop)))
                found[missing] = np.arange(start, stop)
            else:
                new = dict.fromkeys(new_keys)
                rows.update(zip(new, range(start, start + len(new))))
                found[missing] = list(map(rows.__getitem__, new_keys))
        elif self.oov_row is None:
            raise KeyError(
                f"KeyIndex '{self.name}' is frozen and has no row "
                f"for key {new_keys[0]!r}."
            )
        else:
            found[missing] = self.oov_row
        return found

    def keys(self):
        """Keys in row order."""
        return list(self._rows)

    def lookup_layer(self):
        """A TensorFlow lookup layer giving every key the row `lookup` gives
        it now, frozen: unknown keys map to `oov_row`.

        The layer is a snapshot of the index (keys added afterwards are
        unknown to it) wrapping a `tf.lookup.StaticHashTable`, like
        `keras.layers.IntegerLookup` / `StringLookup`: it runs TensorFlow
        ops and returns TensorFlow int64 tensors of the shape of its
        input, in a `tf.data` pipeline on every backend or in a TensorFlow
        graph, not inside a model compiled by JAX or torch. It takes
        string tensors (UTF-8) for a `"string"` index, integer tensors
        for an `"int64"` one, and raises a `TypeError` otherwise. To serve
        a model on raw keys, see `kmodels.models.export_with_keys`.

        Returns:
            A `keras.layers.Layer` mapping keys to int64 rows.

        Raises:
            ValueError: the index has `oov_row=None` (frozen, it raises a
                `KeyError` for an unknown key, which a table cannot
                express).

        Example:

        ```python
        index = kmodels.layers.KeyIndex("string")
        index.lookup(["sku-9", "sku-2"])  # array([1, 2])
        rows = index.lookup_layer()
        rows(tf.constant(["sku-2", "sku-7"]))  # [2, 0]
        dataset = dataset.map(lambda k, y: (rows(k), y))
        ```
        """
        return key_table(self)

    # ---------------------------------------------------------------- saving
    def _entry_names(self):
        if self.key_dtype == "string":
            return ("key_bytes", "key_lengths", "frozen")
        return ("keys", "frozen")

    def save_own_variables(self, store):
        keys = self.keys()
        entries = {}
        if self.key_dtype == "string":
            # Weight stores hold numbers: UTF-8 bytes plus their lengths.
            encoded = [k.encode("utf-8") for k in keys]
            entries["key_bytes"] = np.frombuffer(b"".join(encoded), np.uint8)
            entries["key_lengths"] = np.array(
                [len(e) for e in encoded], np.int64
            ).reshape(-1)
        else:
            entries["keys"] = np.array(keys, dtype=np.int64).reshape(-1)
        entries["frozen"] = np.array(int(self.frozen), np.int64)
        for name, value in entries.items():
            store[name] = value
        store["checksum"] = entry_checksums(entries, self._entry_names())

    def load_own_variables(self, store):
        where = f"KeyIndex '{self.name}'"
        entries = checked_entries(store, self._entry_names(), where)
        frozen = entries["frozen"]
        if frozen.shape != () or int(frozen) not in (0, 1):
            raise ValueError(
                f"{where}: saved entry 'frozen' must be a scalar 0 or 1; got "
                f"shape {frozen.shape}, value {frozen.reshape(-1)[:1]}."
            )
        if self.key_dtype == "string":
            keys = self._saved_string_keys(entries, where)
        else:
            saved = entries["keys"]
            if saved.ndim != 1 or saved.dtype.kind not in "iu":
                raise ValueError(
                    f"{where}: saved entry 'keys' must be a 1-D integer "
                    f"array; got shape {saved.shape}, dtype {saved.dtype}."
                )
            keys = saved.astype(np.int64).tolist()
        if len(set(keys)) != len(keys):
            seen = set()
            twice = next(k for k in keys if k in seen or seen.add(k))
            raise ValueError(
                f"{where}: the saved keys hold {twice!r} twice; each key has "
                "one row, so the rows after it would shift. The weights "
                "file is corrupted."
            )
        # Checked: only now does the index change.
        start = self.first_row
        self._set_rows(dict(zip(keys, range(start, start + len(keys)))))
        self.frozen = bool(int(frozen))

    def _saved_string_keys(self, entries, where):
        data, lengths = entries["key_bytes"], entries["key_lengths"]
        if data.ndim != 1 or data.dtype != np.uint8:
            raise ValueError(
                f"{where}: saved entry 'key_bytes' must be a 1-D uint8 "
                f"array; got shape {data.shape}, dtype {data.dtype}."
            )
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
            raise ValueError(
                f"{where}: saved entry 'key_lengths' must be a 1-D integer "
                f"array; got shape {lengths.shape}, dtype {lengths.dtype}."
            )
        lengths = lengths.astype(np.int64)
        if lengths.size and int(lengths.min()) < 0:
            raise ValueError(
                f"{where}: saved entry 'key_lengths' holds a negative "
                f"length ({int(lengths.min())}). The weights file is "
                "corrupted."
            )
        total = int(lengths.sum(dtype=np.int64))
        if total != data.size:
            raise ValueError(
                f"{where}: saved entry 'key_lengths' sums to {total} bytes "
                f"but 'key_bytes' holds {data.size}. The weights file is "
                "corrupted."
            )
        raw = data.tobytes()
        ends = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        keys = []
        for i, (s, e) in enumerate(zip(ends, ends[1:])):
            try:
                keys.append(raw[s:e].decode("utf-8"))
            except UnicodeDecodeError:
                raise ValueError(
                    f"{where}: saved key {i} ({raw[s:e]!r}) is not valid "
                    "UTF-8. The weights file is corrupted."
                ) from None
        return keys

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "key_dtype": self.key_dtype,
                "first_row": self.first_row,
                "oov_row": self.oov_row,
                "frozen": self.frozen,
            }
        )
        return config


def _groups(values):
    """`(first, inverse)` of a flat NumPy array: the position where each
    distinct value first appears (in sorted order of the values) and, for
    every position, the index of its value in `first`."""
    # An unstable sort is several times faster than a stable one; ties are
    # resolved by taking the smallest position of each run.
    if not values.size:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    order = np.argsort(values)
    ordered = values[order]
    starts = np.empty(values.size, dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    bounds = np.flatnonzero(starts)
    first = np.minimum.reduceat(order, bounds)
    inverse = np.empty(values.size, dtype=np.intp)
    inverse[order] = np.repeat(
        np.arange(bounds.size), np.diff(bounds, append=values.size)
    )
    return first, inverse


def _distinct_ints(flat):
    """`(distinct, first, inverse)` of a flat int64 array: its distinct keys
    as Python ints, the position where each first appears, and for every
    position the index of its key in `distinct`."""
    first, inverse = _groups(flat)
    return flat[first].tolist(), first, inverse


def _distinct_strings(flat):
    """`(distinct, first, inverse)` of a list of `str`, as
    `_distinct_ints`, or `None` when two of its keys share a hash."""
    # Grouped by Python's (cached, 64-bit) string hash with a NumPy sort.
    # Equal keys share a hash, so there are at least as many distinct keys
    # as hash groups; as many means no two keys share a group: exact.
    hashes = np.fromiter(map(hash, flat), dtype=np.int64, count=len(flat))
    first, inverse = _groups(hashes)
    if len(first) != len(set(flat)):
        return None  # Two keys share a hash: look every key up instead.
    return list(map(flat.__getitem__, first.tolist())), first, inverse
