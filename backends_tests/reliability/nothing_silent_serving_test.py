"""Nothing silent when a model is fed raw keys or exported (issue 43).

- `export_with_keys` of a model whose `KeyIndex` holds no keys raises a
  `ValueError` naming the index, its layer and its input, before anything
  is written (TensorFlow would fail deep in its subprocess: "keys and
  values cannot be empty tensors").
- Raw string keys given to `fit`, `evaluate` or `predict` of a functional
  model whose `GrowableEmbedding` has a `key_index` raise the layer's own
  eager `TypeError` (it names `KeyIndex`), not Keras' "Invalid dtype",
  once the model checks its data (`kmodels.contracts.enforce`, or any run
  of the model), and change no weight.
- An unknown key on a frozen `KeyIndex` reads its `oov_row`, which starts
  at zeros (every reserved row of a keyed table does), not at random
  values.
- `Translator.export` on torch raises a `NotImplementedError` that names
  `TextTranslator.export` before Keras' exporter fails; nothing is written.
"""

import os

import keras
import numpy as np
import pytest

import kmodels
from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.models import export_with_keys
from kmodels.seq2seq import Translator

# The eager call's message, matched whole.
RAW_KEYS = (
    r"^GrowableEmbedding 'users' expects integer ids; got dtype <U1\. Map "
    r"raw keys to rows with kmodels\.layers\.KeyIndex\.$"
)


def _keyed_model(index=None):
    table = GrowableEmbedding(
        2,
        initial_capacity=4,
        optimizer="sgd",
        seed=0,
        key_index=KeyIndex("string") if index is None else index,
        name="users",
    )
    user = keras.Input(shape=(1,), dtype="int32", name="user")
    model = keras.Model(user, keras.layers.Dense(1, name="score")(table(user)))
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_export_with_keys_refuses_an_index_that_holds_no_keys(tmp_path):
    model = _keyed_model()
    index = model.get_layer("users").key_index
    path = tmp_path / "served"
    with pytest.raises(
        ValueError,
        match=(
            rf"^export_with_keys: KeyIndex '{index.name}' \(of layer "
            r"'users'\), for input 'user', holds no keys; a served model "
            r"needs keys to look up\. Fill it first"
        ),
    ):
        export_with_keys(model, str(path))
    assert not path.exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("entry", ["fit", "evaluate", "predict"])
def test_raw_string_keys_in_fit_raise_the_eager_error(entry):
    model = _keyed_model()
    keys = np.array([["a"], ["b"]])
    table = model.get_layer("users")
    with pytest.raises(TypeError, match=RAW_KEYS):
        table(keys)
    kmodels.contracts.enforce(model)
    before = [keras.ops.convert_to_numpy(w).copy() for w in model.weights]
    arguments = (keys,) if entry == "predict" else (keys, np.zeros((2, 1, 1)))
    with pytest.raises(TypeError, match=RAW_KEYS):
        getattr(model, entry)(*arguments, verbose=0)
    after = [keras.ops.convert_to_numpy(w) for w in model.weights]
    assert all(np.array_equal(b, a) for b, a in zip(before, after))


def test_raw_string_keys_after_a_first_fit_raise_the_eager_error():
    # A model that ran once checks its data without `enforce`.
    model = _keyed_model()
    rows = model.get_layer("users").key_index.lookup(np.array([["a"], ["b"]]))
    model.fit(
        rows.astype("int32"),
        np.zeros((2, 1, 1)),
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    with pytest.raises(TypeError, match=RAW_KEYS):
        model.fit(np.array([["a"], ["b"]]), np.zeros((2, 1, 1)), verbose=0)


def _translator():
    keras.utils.set_random_seed(2)
    model = Translator(10, 12, 4)
    context = np.array([[2, 5, 6, 3, 0]], "int32")
    model((context, np.array([[2, 6, 7]], "int32")))
    return model


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="on TensorFlow and JAX Translator.export is Keras' Model.export, "
    "unchanged: test_translator_export_writes_the_logits_model "
    "(backends_tests/seq2seq/export_test.py) checks what it writes",
)
def test_translator_export_refuses_on_torch(tmp_path):
    model = _translator()
    path = tmp_path / "logits"
    spec = keras.InputSpec(shape=(None, None), dtype="int32")
    for format in ("tf_saved_model", "torch", "onnx", "litert"):
        with pytest.raises(
            NotImplementedError,
            match=(
                r"^Translator\.export \(Keras' Model\.export\) is not "
                r"supported on the torch backend: .* use "
                r"TextTranslator\.export \(strings in and out, written as a "
                r"TensorFlow SavedModel by a TensorFlow subprocess from any "
                r"backend\)"
            ),
        ):
            model.export(
                str(path), format=format, input_signature=[(spec, spec)]
            )
    assert not path.exists()


@pytest.mark.parametrize(
    "index, reserved",
    [(KeyIndex("string"), 1), (KeyIndex("string", first_row=2, oov_row=1), 2)],
    ids=["default", "first_row=2"],
)
def test_an_unknown_key_on_a_frozen_index_reads_zeros(index, reserved):
    table = GrowableEmbedding(3, initial_capacity=4, seed=0, key_index=index)
    rows = index.lookup(["a", "b"])
    index.freeze()
    unknown = index.lookup(["nobody"])
    assert unknown.tolist() == [index.oov_row]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(table(unknown.astype("int32"))),
        np.zeros((1, 3), "float32"),
    )
    values = keras.ops.convert_to_numpy(table.embeddings.value)
    # The reserved rows start at zeros; the keys' rows as the initializer
    # draws them (an unkeyed table's rows, row 0 included).
    np.testing.assert_array_equal(values[:reserved], 0.0)
    plain = GrowableEmbedding(3, initial_capacity=4, seed=0)
    plain.build()
    drawn = keras.ops.convert_to_numpy(plain.embeddings.value)
    np.testing.assert_array_equal(values[reserved:], drawn[reserved:])
    assert np.all(drawn[:reserved] != 0.0)
    assert rows.tolist() == [reserved, reserved + 1]


def test_a_wrong_channel_count_is_refused_the_same_everywhere():
    # Issue 43, item 8: an enforced image model given images with another
    # channel count. TensorFlow raised its own `InvalidArgumentError`
    # ("Depth of input") from inside the compiled step; JAX and torch
    # Keras' `ValueError`. Now every entry point, and an eager call, raise
    # the layer's message before any step, and no weight changes.
    from kmodels.contracts import enforce
    from kmodels.layers import PatchEmbedding

    images = keras.Input((4, 4, 3))
    patches = PatchEmbedding(2, embedding_dim=4, name="patches")
    model = enforce(
        keras.Model(images, keras.ops.mean(patches(images), axis=(1, 2)))
    )
    model.compile(optimizer="sgd", loss="mse")
    before = [np.array(w) for w in model.get_weights()]
    bad = np.zeros((2, 4, 4, 5), "float32")
    message = (
        r"PatchEmbedding 'patches' was built for images with 3 channels; "
        r"got 5 \(shape \(2, 4, 4, 5\)\)\."
    )
    with pytest.raises(ValueError, match=message):
        model.fit(bad, np.zeros((2,), "float32"), verbose=0)
    with pytest.raises(ValueError, match=message):
        model.predict(bad, verbose=0)
    with pytest.raises(ValueError, match=message):
        patches(bad)
    for kept, now in zip(before, model.get_weights()):
        np.testing.assert_array_equal(kept, now)
    # The right channel count still trains.
    model.fit(np.ones((2, 4, 4, 3), "float32"), np.ones((2,)), verbose=0)
