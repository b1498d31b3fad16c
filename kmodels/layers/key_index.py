"""Maps arbitrary keys (int64 ids, strings) to dense rows of a table."""

import keras
import numpy as np

_KEY_DTYPES = ("int64", "string")


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

    Args:
        key_dtype: `"int64"` or `"string"`.
        first_row: int. Row of the first key; rows below it are reserved
            (row 0 for padding with `mask_zero=True`, or for unknown keys).
        oov_row: int or `None`. Row of unknown keys once frozen.
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
        if key_dtype not in _KEY_DTYPES:
            raise ValueError(
                f"key_dtype must be one of {_KEY_DTYPES}; got {key_dtype!r}."
            )
        if first_row < 0:
            raise ValueError(f"first_row must be >= 0; got {first_row}.")
        if oov_row is not None and not 0 <= oov_row < max(first_row, 1):
            raise ValueError(
                f"oov_row must be a reserved row in [0, first_row={first_row})"
                f"; got {oov_row}."
            )
        self.key_dtype = key_dtype
        self.first_row = int(first_row)
        self.oov_row = oov_row
        self.frozen = bool(frozen)
        self._rows = {}
        self.built = True

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

    def _key(self, key):
        if self.key_dtype == "string":
            if isinstance(key, bytes):
                return key.decode("utf-8")
            if not isinstance(key, str):
                raise TypeError(
                    f"KeyIndex '{self.name}' has string keys; got "
                    f"{type(key).__name__} {key!r}."
                )
            return key
        if isinstance(key, (bool, np.bool_)) or not isinstance(
            key, (int, np.integer)
        ):
            raise TypeError(
                f"KeyIndex '{self.name}' has int64 keys; got "
                f"{type(key).__name__} {key!r}."
            )
        return int(key)

    def lookup(self, keys, grow=None):
        """Rows of `keys` (any shape) as an int64 NumPy array.

        Args:
            keys: array-like of keys.
            grow: bool or `None`. Assign rows to new keys; `None` means
                "unless frozen". `grow=True` on a frozen index raises.
        """
        if grow is None:
            grow = not self.frozen
        if grow and self.frozen:
            raise ValueError(f"KeyIndex '{self.name}' is frozen.")
        keys = np.asarray(keys, dtype=object)
        out = np.empty(keys.shape, dtype=np.int64)
        flat_out = out.reshape(-1)
        for i, raw in enumerate(keys.reshape(-1)):
            key = self._key(raw)
            row = self._rows.get(key)
            if row is None:
                if grow:
                    row = self.first_row + len(self._rows)
                    self._rows[key] = row
                elif self.oov_row is None:
                    raise KeyError(
                        f"KeyIndex '{self.name}' is frozen and has no row "
                        f"for key {key!r}."
                    )
                else:
                    row = self.oov_row
            flat_out[i] = row
        return out

    def keys(self):
        """Keys in row order."""
        return list(self._rows)

    def save_own_variables(self, store):
        keys = self.keys()
        if self.key_dtype == "string":
            # Weight stores hold numbers: UTF-8 bytes plus their lengths.
            encoded = [k.encode("utf-8") for k in keys]
            store["key_bytes"] = np.frombuffer(b"".join(encoded), np.uint8)
            store["key_lengths"] = np.array([len(e) for e in encoded], np.int64)
        else:
            store["keys"] = np.array(keys, dtype=np.int64)
        store["frozen"] = np.array(int(self.frozen), np.int64)

    def load_own_variables(self, store):
        if self.key_dtype == "string":
            data = np.asarray(store["key_bytes"]).astype(np.uint8).tobytes()
            lengths = np.asarray(store["key_lengths"]).tolist()
            ends = np.cumsum([0] + lengths).tolist()
            keys = [data[s:e].decode("utf-8") for s, e in zip(ends, ends[1:])]
        else:
            keys = np.asarray(store["keys"]).astype(np.int64).tolist()
        self._rows = {}
        for key in keys:
            self._rows[key] = self.first_row + len(self._rows)
        self.frozen = bool(np.asarray(store["frozen"]))

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
