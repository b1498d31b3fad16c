"""On the TensorFlow backend both exporters write their SavedModel in the
calling process (`kmodels.export.tensorflow_process`): no TensorFlow
subprocess is started, and what they write serves what the model computes.
"""

import keras
import numpy as np
import pytest

from kmodels.export import tensorflow_process
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.models import export_with_keys
from kmodels.testing.exports import tiny_bundle

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="only the TensorFlow backend exports in its own process; on JAX "
    "and torch the export starts a TensorFlow process, which the export "
    "tests of export_test.py, key_serving_test.py and growable_delta_test.py "
    "run",
)


@pytest.fixture
def no_subprocess(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args[0]}")

    monkeypatch.setattr(tensorflow_process.subprocess, "run", refuse)
    monkeypatch.setattr(tensorflow_process.subprocess, "Popen", refuse)


def test_text_translator_exports_here_and_serves_translate(
    tmp_path, no_subprocess
):
    import tensorflow as tf

    bundle = tiny_bundle(built=True)
    path = str(tmp_path / "served")
    bundle.export(path, sampler="beam", num_beams=2, num_return_sequences=2)
    texts = ["hola casa", "esta en casa", "hola"]
    served = tf.saved_model.load(path)
    got = served.signatures["nbest"](texts=tf.constant(texts))
    nbest, scores = bundle.translate(
        texts,
        sampler="beam",
        num_beams=2,
        return_all_beams=True,
        return_scores=True,
    )
    strings = got["translations"].numpy().astype(str).tolist()
    assert strings == [list(beams[:2]) for beams in nbest]
    # float32 sums of <= 5 log-probabilities, one loop against another.
    np.testing.assert_allclose(
        got["scores"].numpy(), np.asarray(scores)[:, :2], rtol=1e-5, atol=1e-5
    )
    # `translate`'s `num_return_sequences` gives what the export serves.
    two, two_scores = bundle.translate(
        texts,
        sampler="beam",
        num_beams=2,
        num_return_sequences=2,
        return_scores=True,
    )
    assert two == strings
    np.testing.assert_allclose(
        got["scores"].numpy(), two_scores, rtol=1e-5, atol=1e-5
    )
    # The n-best's attention weights and source ids: what `translate(...,
    # return_attention=True)` returns.
    _, weights = bundle.translate(
        texts,
        sampler="beam",
        num_beams=2,
        num_return_sequences=2,
        return_attention=True,
    )
    np.testing.assert_allclose(
        got["attention"].numpy(), weights, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(
        got["source_ids"].numpy(), bundle.context_processor(texts)
    )


def test_export_with_keys_exports_here_and_serves_the_rows(
    tmp_path, no_subprocess
):
    import tensorflow as tf

    index = KeyIndex("string")
    index.lookup(["a", "b", "c"])
    ids = keras.Input(shape=(), dtype="int32", name="user")
    table = GrowableEmbedding(
        2, initial_capacity=4, key_index=index, name="users"
    )
    model = keras.Model(ids, table(ids))
    path = str(tmp_path / "keyed")
    export_with_keys(model, path)
    served = tf.saved_model.load(path)
    out = served.signatures["serving_default"](
        user=tf.constant(["c", "a", "b"])
    )
    (vectors,) = out.values()
    rows = index.lookup(["c", "a", "b"])
    expected = keras.ops.convert_to_numpy(table.embeddings.value)[rows]
    np.testing.assert_array_equal(vectors.numpy(), expected)
