"""Serving raw keys: `KeyIndex.lookup_layer()` (a TensorFlow lookup table)
and `kmodels.models.export_with_keys` (a SavedModel taking raw keys).

The export round trip trains a small two-tower model over growing tables
on the running backend (string user keys; int64 item keys with reserved
rows 0 and 1, unknown items on row 1), exports it (a TensorFlow
subprocess), serves it from a TensorFlow-only Python process
(`backends_tests/tensorflow_only.py`) in which Keras and kmodels cannot
be imported, and compares its outputs on raw keys, known
and unknown, with the Python pipeline (`KeyIndex.lookup`, then
`model.predict`) and with a NumPy dot product of the trained tables.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from backends_tests import tensorflow_only
from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.models import export_with_keys
from kmodels.testing.exports import assert_only_a_saved_model

USERS = [f"user-{n}-ü" for n in range(10)] + ["", "日本"]
ITEMS = [10**15 + n for n in range(6)] + [-(2**63), 2**63 - 1, 0, -7]
UNKNOWN_USERS = ["nobody", "user-1-u"]
UNKNOWN_ITEMS = [1, 10**15 + 6]

# The TensorFlow-only process: Keras, kmodels and the other frameworks
# cannot be imported; TensorFlow loads the SavedModel and serves raw keys.
_SERVE = r"""
import json
import sys

for name in ("keras", "kmodels", "keras_hub", "tf_keras", "jax", "torch"):
    sys.modules[name] = None
import numpy as np
import tensorflow as tf

path, users, items, scale = json.load(sys.stdin)
served = tf.saved_model.load(path)
out = served.signatures["serving_default"](
    user=tf.constant(users, tf.string),
    item=tf.constant(items, tf.int64),
    scale=tf.constant(scale, tf.float32),
)
print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))
"""


def _serve(path, users, items, scale):
    return tensorflow_only.run(_SERVE, [path, users, items, scale])


def _two_towers():
    tables = {
        "user": GrowableEmbedding(
            4,
            initial_capacity=4,
            optimizer=("adam", {"learning_rate": 0.05}),
            embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.5),
            seed=1,
            key_index=KeyIndex("string"),
            name="users",
        ),
        "item": GrowableEmbedding(
            4,
            initial_capacity=4,
            optimizer=("adam", {"learning_rate": 0.05}),
            embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.5),
            seed=2,
            key_index=KeyIndex("int64", first_row=2, oov_row=1),
            name="items",
        ),
    }
    inputs = {
        "user": keras.Input(shape=(), dtype="int32", name="user"),
        "item": keras.Input(shape=(), dtype="int32", name="item"),
        "scale": keras.Input(shape=(), dtype="float32", name="scale"),
    }
    dot = keras.ops.sum(
        tables["user"](inputs["user"]) * tables["item"](inputs["item"]),
        axis=-1,
        keepdims=True,
    )
    model = keras.Model(inputs, dot * inputs["scale"][:, None])
    model.compile(
        optimizer="sgd",
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


# The export round trip: a model trained here, exported by a TensorFlow
# subprocess, served by the TensorFlow-only process. Once, in the torch
# environment (backends_tests/conftest.py): its trained model crosses to
# TensorFlow there; the refusals below run on every backend.
_ROUND_TRIP = pytest.mark.cross_backend(
    reason="trained on torch, exported by a TensorFlow subprocess, served "
    "by a TensorFlow-only process (10-15 s)"
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The trained model, its frozen indexes, what the TensorFlow-only
    process returned on known then unknown keys, and the export's path."""
    keras.utils.set_random_seed(0)
    model = _two_towers()
    users = model.get_layer("users").key_index
    items = model.get_layer("items").key_index
    rng = np.random.default_rng(0)
    u = rng.choice(len(USERS), 64)
    i = rng.choice(len(ITEMS), 64)
    x = {
        "user": users.lookup([USERS[k] for k in u]).astype("int32"),
        "item": items.lookup(np.array(ITEMS)[i]).astype("int32"),
        "scale": np.ones(64, "float32"),
    }
    y = (u % 2 == i % 2).astype("float32")[:, None]
    model.fit(
        x, y, batch_size=32, epochs=2, verbose=0, callbacks=[EmbeddingGrowth()]
    )
    users.freeze()
    items.freeze()
    path = str(tmp_path_factory.mktemp("export") / "two_towers")
    keyed = export_with_keys(model, path)
    n = max(len(USERS), len(ITEMS)) + 2
    user_keys = (USERS + UNKNOWN_USERS) * 2
    item_keys = ITEMS + UNKNOWN_ITEMS
    item_keys = (item_keys * 2)[1 : n + 1]
    user_keys = user_keys[:n]
    scale = np.linspace(0.5, 2.0, n).astype("float32").tolist()
    served = _serve(path, user_keys, item_keys, scale)
    return model, keyed, (user_keys, item_keys, scale), served, path


@_ROUND_TRIP
def test_export_finds_the_attached_indexes(exported):
    model, keyed, _, _, _ = exported
    assert keyed == {
        "user": model.get_layer("users").key_index,
        "item": model.get_layer("items").key_index,
    }


@_ROUND_TRIP
def test_export_on_raw_keys_equals_the_python_pipeline(exported):
    model, _, (user_keys, item_keys, scale), served, _ = exported
    assert sorted(served) == ["output_0"]
    out = np.array(served["output_0"], np.float32)
    users = model.get_layer("users")
    items = model.get_layer("items")
    user_rows = users.key_index.lookup(user_keys)
    item_rows = items.key_index.lookup(item_keys)
    # Unknown keys reached the reserved rows: 0 (users), 1 (items).
    assert (user_rows == 0).sum() == sum(k in UNKNOWN_USERS for k in user_keys)
    assert (item_rows == 1).sum() == sum(k in UNKNOWN_ITEMS for k in item_keys)
    assert (item_rows == 1).sum() > 0 and (user_rows == 0).sum() > 0
    predicted = model.predict(
        {
            "user": user_rows.astype("int32"),
            "item": item_rows.astype("int32"),
            "scale": np.array(scale, "float32"),
        },
        verbose=0,
    )
    np.testing.assert_allclose(out, predicted, rtol=0, atol=1e-6)
    # NumPy oracle: the scaled dot product of the trained rows.
    user_table = keras.ops.convert_to_numpy(users.embeddings.value)
    item_table = keras.ops.convert_to_numpy(items.embeddings.value)
    oracle = (user_table[user_rows] * item_table[item_rows]).sum(-1)
    oracle = oracle * np.array(scale)
    np.testing.assert_allclose(out[:, 0], oracle, rtol=0, atol=1e-5)
    # Trained: the tables grew past their initial 4 rows.
    assert users.capacity >= 13 and items.capacity >= 12


@_ROUND_TRIP
def test_export_writes_only_what_a_new_export_replaces(exported):
    # What TensorFlow writes is what `SAVED_MODEL` recognises as a previous
    # export (replaced; anything else in the folder is refused, see
    # reliability/export_folder_test.py), and no working folder is left.
    path = exported[4]
    assert_only_a_saved_model(path)


def test_export_refuses_an_unknown_input_name(tmp_path):
    model = _two_towers()
    with pytest.raises(ValueError, match=r"names input 'users'.*'item'"):
        export_with_keys(
            model, str(tmp_path / "x"), key_indexes={"users": KeyIndex()}
        )


def _frozen_string_index():
    index = KeyIndex("string")
    index.lookup(["b", "é", "", "日本", "a"])
    index.freeze()
    return index


def _frozen_int_index():
    index = KeyIndex("int64", first_row=3, oov_row=1)
    index.lookup([10**12, -5, 2**63 - 1, 0])
    index.freeze()
    return index


@pytest.mark.parametrize(
    "make, keys, expected",
    [
        # Rows 1.. in order of arrival; unknown keys on row 0.
        (
            _frozen_string_index,
            [["a", "zz", "é"], ["", "日本", "e"]],
            [[5, 0, 2], [3, 4, 0]],
        ),
        # Rows 3.. (1 and 2 reserved); unknown keys on row 1.
        (
            _frozen_int_index,
            [[10**12, 7, 0], [-5, 2**63 - 1, -(2**63)]],
            [[3, 1, 6], [4, 5, 1]],
        ),
    ],
)
def test_lookup_layer_gives_the_rows_of_lookup(make, keys, expected):
    index = make()
    layer = index.lookup_layer()
    np.testing.assert_array_equal(index.lookup(keys), expected)
    eager = layer(np.array(keys))
    assert eager.dtype == tf.int64
    np.testing.assert_array_equal(np.asarray(eager), expected)
    # In a tf.data pipeline, on every backend.
    dataset = tf.data.Dataset.from_tensor_slices(np.array(keys)).batch(2)
    (batch,) = list(dataset.map(layer).as_numpy_iterator())
    np.testing.assert_array_equal(batch, expected)


def test_lookup_layer_refuses_an_index_without_oov_row():
    index = KeyIndex("int64", oov_row=None)
    with pytest.raises(ValueError, match="has oov_row=None"):
        index.lookup_layer()


def test_lookup_layer_refuses_keys_of_the_wrong_type():
    layer = _frozen_string_index().lookup_layer()
    with pytest.raises(TypeError, match="maps string keys; got .*int64"):
        layer(np.array([1, 2], np.int64))
    layer = _frozen_int_index().lookup_layer()
    with pytest.raises(TypeError, match="maps int64 keys.*got .*string"):
        layer(np.array(["a"]))
