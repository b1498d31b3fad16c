"""kmodels.layers.PatchEmbedding against the NumPy oracle, and the image
variant of the Transformer encoder training on 8x8 images."""

import keras
import numpy as np
import pytest

from kmodels.layers import PatchEmbedding
from kmodels.models import transformer_encoder
from kmodels.testing import oracle
from kmodels.testing.layer_contract import run_layer_test

np_ = keras.ops.convert_to_numpy

# A 2x2x3 patch is a 12-term float32 dot product of values in [-0.5, 1]:
# measured error ~1e-7; 1e-5 is the stated bound.
TOL = dict(rtol=1e-5, atol=1e-5)


def test_matches_oracle(rng, randomize, parity):
    images = rng.uniform(size=(2, 4, 6, 3)).astype("float32")
    layer = PatchEmbedding(patch_size=2, embedding_dim=5)
    layer.build(images.shape)
    kernel, bias = randomize(layer)
    out = np_(layer(images))
    assert out.shape == (2, 6, 5)
    expected = oracle.patch_embedding(images, kernel, bias, 2)
    np.testing.assert_allclose(out, expected, **TOL)
    parity.record("position/patch_embedding", out, **TOL)


def test_patch_order_is_row_major():
    """Patch k covers rows 2*(k // 3), columns 2*(k % 3) of a 4x6 image."""
    images = np.zeros((1, 4, 6, 1), "float32")
    images[0, 2:4, 2:4, 0] = 1.0  # patch (row 1, column 1) -> index 4
    layer = PatchEmbedding(2, 1, kernel_initializer="ones")
    out = np_(layer(images))[0, :, 0]
    np.testing.assert_array_equal(out, [0, 0, 0, 0, 4, 0])


def test_compute_output_shape():
    layer = PatchEmbedding(4, 8)
    assert layer.compute_output_shape((None, 8, 12, 3)) == (None, 6, 8)


@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 7, 8, 1), "image height to be a multiple of patch_size=2; got 7"),
        ((2, 8, 8), "(batch, height, width, channels); got shape (2, 8, 8)"),
    ],
)
def test_bad_image_shapes(shape, message):
    with pytest.raises(ValueError) as e:
        PatchEmbedding(2, 4)(np.zeros(shape, "float32"))
    assert message in str(e.value)


def test_bad_arguments():
    with pytest.raises(ValueError, match="`patch_size` must be an integer"):
        PatchEmbedding(0, 4)


def test_layer_contract(rng):
    images = rng.uniform(size=(2, 4, 4, 1)).astype("float32")
    run_layer_test(
        PatchEmbedding,
        dict(patch_size=2, embedding_dim=4, kernel_initializer="he_normal"),
        input_data=images,
        expected_output_shape=(2, 4, 4),
        expected_output_dtype="float32",
        expected_num_trainable_weights=2,
        expected_num_non_trainable_weights=0,
        supports_masking=False,
        expected_mask=False,
        # Same weights, same ops: identical outputs after a .keras round
        # trip.
        tolerance=0,
    )


def _top_or_bottom(n, rng):
    """8x8 noise with one bright 2x2 square; label 1 if it is in the top
    half. Mean pooling without positions cannot tell the halves apart."""
    images = rng.uniform(0, 0.3, size=(n, 8, 8, 1)).astype("float32")
    labels = rng.integers(0, 2, size=n).astype("int32")
    for i in range(n):
        row = rng.integers(0, 3) * 2 + (0 if labels[i] else 4)
        row = min(row, 6) if not labels[i] else min(row, 2)
        col = rng.integers(0, 4) * 2
        images[i, row : row + 2, col : col + 2, 0] = 1.0
    return images, labels


def test_patch_encoder_trains_on_8x8_images(rng):
    keras.utils.set_random_seed(0)
    x, y = _top_or_bottom(128, rng)
    model = transformer_encoder(
        PatchEmbedding(4, 8), (8, 8, 1), num_classes=2, intermediate_dim=16
    )
    model.compile(
        keras.optimizers.Adam(2e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    before = float(model.compute_loss(x=x, y=y, y_pred=model(x)))
    model.fit(x, y, batch_size=16, epochs=8, verbose=0)
    logits = np_(model(x))
    after = float(model.compute_loss(x=x, y=y, y_pred=logits))
    accuracy = float(np.mean(np.argmax(logits, -1) == y))
    # Chance is 0.5 and the initial loss ~ln 2 = 0.69; 64 Adam steps reach
    # >= 97% here on every backend: 0.9 and a 3x lower loss leave margin for
    # the backends' different random initialisations.
    assert accuracy >= 0.9, accuracy
    assert after < before / 3, (before, after)
