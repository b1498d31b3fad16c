"""A plain functional or `keras.Sequential` model whose first call is
`predict` (or `predict_on_batch`) checks its later calls on every backend.

On JAX the trainer runs the step through `model.stateless_call`, which
names no model to the layers inside; kmodels finds the model there too
(`kmodels.backend.keras_internals.outermost_layer`), so a bad id is refused
instead of giving NaN, and a refused image leaves the weights readable
(issue 42, reproduction 1).
"""

import warnings

import keras
import numpy as np
import pytest

from kmodels.layers.patch_embedding import PatchEmbedding
from kmodels.layers.positional_embedding import PositionalEmbedding

GOOD = np.array([[1, 2, 3, 4], [4, 3, 2, 1]], "int32")
BAD = np.array([[1, 2, 3, 4], [4, 3, 2, 10]], "int32")
RANGE = (
    "PositionalEmbedding: inputs must lie in [0, 10) (vocabulary_size=10); "
    "got values [10] (min 1, max 10)"
)


def _functional():
    ids = keras.Input((4,), dtype="int32")
    layer = PositionalEmbedding(keras.layers.Embedding(10, 4), 4)
    return keras.Model(ids, layer(ids))


def _sequential():
    return keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            PositionalEmbedding(keras.layers.Embedding(10, 4), 4),
        ]
    )


def _predict(model, x):
    return model.predict(x, verbose=0)


def _predict_on_batch(model, x):
    return keras.ops.convert_to_numpy(model.predict_on_batch(x))


def _first(run, model, x):
    # The first compiled step is traced before kmodels knows the model:
    # it may warn that it runs unchecked (its data is good here).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(model, x)


def _oracle(model, x):
    """NumPy: token rows plus position rows, from the model's weights."""
    tokens, positions = model.get_weights()
    return tokens[x] + positions[np.arange(x.shape[1])]


@pytest.mark.parametrize("build", [_functional, _sequential])
@pytest.mark.parametrize("run", [_predict, _predict_on_batch])
def test_first_predict_then_bad_id_is_refused(build, run):
    keras.utils.set_random_seed(1)
    model = build()
    first = _first(run, model, GOOD)
    np.testing.assert_allclose(first, _oracle(model, GOOD), atol=1e-6)
    for entry in (_predict, _predict_on_batch):
        with pytest.raises(ValueError) as caught:
            entry(model, BAD)
        assert str(caught.value) == RANGE
    assert len(model.get_weights()) == 2
    np.testing.assert_array_equal(run(model, GOOD), first)


def test_refused_image_leaves_the_weights_readable():
    keras.utils.set_random_seed(2)
    images = keras.Input((None, None, 1))
    model = keras.Model(images, PatchEmbedding(2, 3)(images))
    good = (np.arange(2 * 4 * 4).reshape(2, 4, 4, 1) % 5).astype("float32")
    first = _first(_predict, model, good)
    kernel, bias = model.get_weights()
    # NumPy oracle: the first (2x2) patch of each image times the kernel.
    expected = np.einsum("bhwc,hwcd->bd", good[:, :2, :2], kernel) + bias
    np.testing.assert_allclose(first[:, 0], expected, rtol=1e-5, atol=1e-6)
    for entry in (_predict, _predict_on_batch):
        with pytest.raises(ValueError) as caught:
            entry(model, np.ones((2, 5, 4, 1), "float32"))
        assert str(caught.value) == (
            "PatchEmbedding expects the image height to be a multiple of "
            "patch_size=2; got 5."
        )
    after = model.get_weights()
    np.testing.assert_array_equal(after[0], kernel)
    np.testing.assert_array_equal(after[1], bias)
    np.testing.assert_array_equal(_predict(model, good), first)
