"""Weight paths survive a `.keras` round trip (#12, found by the layer
contract helper).

A layout map (`keras.distribution.LayoutMap`) names weights by path. A
sublayer given to a kmodels constructor (`PositionalEmbedding(embedding)`,
`Autoencoder(encoder)`, `Translator(encoder=...)`) is built under its
parent's name scope when the model is made, so its weights read
`positional_embedding/embedding/embeddings`; loading the file used to build
it on its own, outside that scope (`embedding/embeddings`). Keras numbers
the GRUs a `Bidirectional` wraps per process (`forward_gru_3`), so paths
are compared with those counters removed.
"""

import re

import keras
import numpy as np
import pytest

from kmodels.layers import PositionalEmbedding
from kmodels.saving import load_model
from kmodels.saving import save_model
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import Encoder
from kmodels.seq2seq import Translator


def _paths(model):
    return [re.sub(r"_\d+(?=/|$)", "", w.path) for w in model.weights]


def _positional():
    inputs = keras.Input((6,), dtype="int32")
    layer = PositionalEmbedding(keras.layers.Embedding(20, 8), 6)
    return keras.Model(inputs, layer(inputs)), np.ones((2, 6), "int32")


def _autoencoder():
    model = Autoencoder(Encoder(20, 4, name="encoder"))
    return model, np.ones((2, 5), "int32")


def _translator():
    model = Translator(
        encoder=Encoder(20, 4, name="encoder"), target_vocabulary_size=12
    )
    return model, (np.ones((2, 5), "int32"), np.ones((2, 3), "int32"))


@pytest.mark.parametrize(
    "make",
    [_positional, _autoencoder, _translator],
    ids=lambda f: f.__name__[1:],
)
def test_weight_paths_survive_a_keras_round_trip(make, tmp_path):
    model, x = make()
    expected = model(x)
    path = str(tmp_path / "model.keras")
    save_model(model, path)
    loaded = load_model(path)
    assert _paths(loaded) == _paths(model)
    # The embedding's path keeps its parent's prefix.
    assert all("/" in p for p in _paths(loaded))
    # Same weights; float32 round-off only (an eager call may run compiled
    # on JAX, which reassociates sums: measured <= 1.2e-7 absolute).
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)),
        keras.ops.convert_to_numpy(expected),
        rtol=1e-6,
        atol=1e-6,
    )
