"""`KeyTable`: the keys of a frozen `KeyIndex` as a TensorFlow lookup table.

A data-pipeline layer (TensorFlow ops, like `keras.layers.StringLookup`): it
runs in a `tf.data` pipeline on every backend, or in a TensorFlow graph (the
keyed SavedModel of `kmodels.export`), not inside a model compiled by JAX or
torch. TensorFlow is imported when a table is built.
"""

import keras
import numpy as np

from kmodels.backend import keras_internals


class KeyTable(keras.layers.Layer):
    """Maps raw keys to rows with a TensorFlow static hash table.

    Built by `KeyIndex.lookup_layer()`; a data-pipeline layer (TensorFlow
    ops, like `keras.layers.IntegerLookup`) that returns TensorFlow int64
    tensors of the shape of its input, on every backend. It holds a copy
    of the keys: it is not saved with a model (rebuild it from the index).

    Args:
        keys: list of `str` or of ints, distinct.
        rows: int64 array-like, the row of each key.
        key_dtype: `"string"` or `"int64"`.
        default_row: int, the row of keys not in `keys`.
        **kwargs: other `keras.layers.Layer` arguments (`name`).
    """

    def __init__(self, keys, rows, key_dtype, default_row, **kwargs):
        super().__init__(trainable=False, **kwargs)
        import tensorflow as tf

        # As Keras' lookup layers: TensorFlow tensors in and out, untouched
        # by the backend's input conversion, never jit-compiled.
        keras_internals.take_inputs_as_given(self)
        self.supports_jit = False
        self.key_dtype = key_dtype
        self.default_row = int(default_row)
        self._tf_dtype = tf.string if key_dtype == "string" else tf.int64
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(keys, self._tf_dtype, shape=[len(keys)]),
                tf.constant(rows, tf.int64, shape=[len(keys)]),
            ),
            default_value=np.int64(self.default_row),
        )
        self.built = True

    def call(self, keys):
        import tensorflow as tf

        keys = _key_tensor(keys, self.key_dtype, self.name)
        with tf.device("CPU:0"):
            return self.table.lookup(keys)

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, keys):
        return keras.KerasTensor(keys.shape, dtype="int64")


def _key_tensor(keys, key_dtype, name):
    """`keys` as a TensorFlow tensor of the table's key type, or raises a
    `TypeError` naming what arrived."""
    import tensorflow as tf

    if not tf.is_tensor(keys):
        array = np.asarray(keys)
        if array.dtype.kind == "O":
            array = array.astype(str if key_dtype == "string" else np.int64)
        keys = tf.convert_to_tensor(array)
    if key_dtype == "string":
        if keys.dtype != tf.string:
            raise TypeError(
                f"KeyTable '{name}' maps string keys; got a tensor of "
                f"{keys.dtype.name}."
            )
        return keys
    if not keys.dtype.is_integer or keys.dtype in (tf.uint64,):
        raise TypeError(
            f"KeyTable '{name}' maps int64 keys (any signed integer dtype, "
            f"or uint8/16/32); got a tensor of {keys.dtype.name}."
        )
    return tf.cast(keys, tf.int64)


def key_table(index):
    """The `KeyTable` of a `KeyIndex`: its keys, their rows, its
    `oov_row` for unknown keys; a `ValueError` when it has no `oov_row`
    (a table has no way to refuse one key of a batch)."""
    if index.oov_row is None:
        raise ValueError(
            f"KeyIndex '{index.name}' has oov_row=None: frozen, it raises a "
            "KeyError for an unknown key, which a lookup table cannot "
            "express (it maps every key to a row). Give the index a "
            "reserved `oov_row` (e.g. KeyIndex(..., first_row=1, "
            "oov_row=0)) to serve it."
        )
    with index._index_lock:
        keys, rows = index.keys(), index.rows()
    return KeyTable(
        keys,
        rows,
        index.key_dtype,
        index.oov_row,
        name=f"{index.name}_table",
    )
