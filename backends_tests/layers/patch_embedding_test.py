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


# Non-square patches, padding, class token, images of any size (issue 32,
# item 2). The oracle pads and cuts patches in NumPy, float64.


def _by_name(layer, values):
    return {w.path.split("/")[-1]: v for w, v in zip(layer.weights, values)}


@pytest.mark.parametrize(
    "patch_size, padding, class_token, shape",
    [
        ((2, 3), "valid", False, (2, 4, 9, 3)),
        ((2, 3), "same", True, (2, 5, 7, 3)),
        (3, "same", False, (1, 7, 6, 2)),
    ],
)
def test_patches_padding_and_class_token_match_oracle(
    rng, randomize, patch_size, padding, class_token, shape
):
    images = rng.uniform(size=shape).astype("float32")
    layer = PatchEmbedding(
        patch_size, 5, padding=padding, class_token=class_token
    )
    layer.build(images.shape)
    weights = _by_name(layer, randomize(layer))
    out = np_(layer(images))
    expected = oracle.patch_embedding(
        images,
        weights["kernel"],
        weights["bias"],
        patch_size,
        padding=padding,
        class_token=weights.get("class_token"),
    )
    assert out.shape == expected.shape
    assert layer.compute_output_shape(shape) == expected.shape
    np.testing.assert_allclose(out, expected, **TOL)


def test_same_padding_is_zeros_at_the_bottom_and_right():
    """A 3x3 image of ones, patches of 2: the patches hold 4, 2, 2 and 1
    pixels of the image, the rest zero padding."""
    layer = PatchEmbedding(2, 1, kernel_initializer="ones", padding="same")
    out = np_(layer(np.ones((1, 3, 3, 1), "float32")))[0, :, 0]
    np.testing.assert_array_equal(out, [4, 2, 2, 1])


def test_class_token_is_the_same_learned_vector_first():
    layer = PatchEmbedding(2, 3, class_token=True)
    images = np.random.default_rng(0).uniform(size=(2, 4, 4, 1))
    layer.build(images.shape)
    token = np.array([[[0.5, -1.0, 2.0]]], "float32")
    layer.class_embedding.assign(token)
    out = np_(layer(images.astype("float32")))
    assert out.shape == (2, 5, 3)
    np.testing.assert_array_equal(out[:, :1], np.tile(token, (2, 1, 1)))
    without = PatchEmbedding(2, 3)
    without.build(images.shape)
    without.set_weights(layer.get_weights()[1:])
    np.testing.assert_array_equal(
        out[:, 1:], np_(without(images.astype("float32")))
    )


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize(
    "patch_size, shape, message, padded_length",
    [
        (
            (2, 3),
            (1, 4, 8, 1),
            "PatchEmbedding expects the image width to be a multiple of "
            "the patch width 3 (patch_size=(2, 3)); got 8.",
            2 * 3,
        ),
        (
            4,
            (1, 6, 8, 1),
            "PatchEmbedding expects the image height to be a multiple of "
            "patch_size=4; got 6.",
            2 * 2,
        ),
    ],
)
def test_valid_padding_refuses_sizes_the_patches_do_not_tile(
    dynamic, patch_size, shape, message, padded_length
):
    # dynamic_image_size accepts any size the patches tile; padding="same"
    # is the way to accept the others (as timm's dynamic_img_pad).
    layer = PatchEmbedding(patch_size, 2, dynamic_image_size=dynamic)
    with pytest.raises(ValueError) as e:
        layer(np.zeros(shape, "float32"))
    assert str(e.value) == message
    padded = PatchEmbedding(patch_size, 2, padding="same")
    assert padded.compute_output_shape(shape) == (1, padded_length, 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(patch_size=(2, 3, 4)),
            "`patch_size` must be an integer >= 1 or a pair (height, width) "
            "of them; got (2, 3, 4).",
        ),
        (
            dict(patch_size=(2, 0)),
            "`patch_size` must be an integer >= 1; got 0 (int).",
        ),
        (
            dict(padding="reflect"),
            "`padding` must be one of ('valid', 'same'); got 'reflect' (str).",
        ),
        (
            dict(dynamic_image_size=1),
            "`dynamic_image_size` must be True or False; got 1 (int).",
        ),
        (
            dict(class_token="yes"),
            "`class_token` must be True or False; got 'yes' (str).",
        ),
    ],
)
def test_bad_new_arguments(kwargs, message):
    args = {"patch_size": 2, "embedding_dim": 4, **kwargs}
    with pytest.raises(ValueError) as e:
        PatchEmbedding(**args)
    assert str(e.value) == f"PatchEmbedding: {message}"


def test_layer_contract_with_every_new_option(rng):
    # 5x7 images, 2x3 patches zero-padded to 6x9: a 3x3 grid and the class
    # token. Config (patch pair, padding, flags) and .keras round trips.
    images = rng.uniform(size=(2, 5, 7, 1)).astype("float32")
    layer = run_layer_test(
        PatchEmbedding,
        dict(
            patch_size=(2, 3),
            embedding_dim=4,
            padding="same",
            dynamic_image_size=True,
            class_token=True,
        ),
        input_data=images,
        expected_output_shape=(2, 10, 4),
        expected_output_dtype="float32",
        expected_num_trainable_weights=3,
        expected_num_non_trainable_weights=0,
        supports_masking=False,
        expected_mask=False,
        tolerance=0,
    )
    config = layer.get_config()
    assert (config["patch_size"], config["padding"]) == ((2, 3), "same")
    assert config["dynamic_image_size"] is True
    assert config["class_token"] is True


def test_old_configs_load_with_the_old_defaults():
    config = PatchEmbedding(2, 4).get_config()
    for key in ("padding", "dynamic_image_size", "class_token"):
        config.pop(key)
    layer = PatchEmbedding.from_config(config)
    assert (layer.patch_size, layer.padding) == (2, "valid")
    assert not layer.dynamic_image_size and not layer.class_token


def test_any_image_size_in_a_compiled_predict(rng):
    """One model, images of three sizes through the backend's compiled
    predict (TensorFlow retraces the second size with unknown sizes, so
    the padding amounts are tensors there): each matches the oracle."""
    layer = PatchEmbedding(
        (2, 3), 4, padding="same", dynamic_image_size=True, class_token=True
    )
    inputs = keras.Input((None, None, 2))
    model = keras.Model(inputs, layer(inputs))
    weights = _by_name(layer, [np_(w) for w in layer.weights])
    weights["class_token"] = rng.uniform(size=(1, 1, 4)).astype("float32")
    layer.class_embedding.assign(weights["class_token"])
    for shape in [(2, 4, 6, 2), (2, 5, 7, 2), (2, 9, 4, 2)]:
        images = rng.uniform(size=shape).astype("float32")
        expected = oracle.patch_embedding(
            images,
            weights["kernel"],
            weights["bias"],
            (2, 3),
            padding="same",
            class_token=weights["class_token"],
        )
        got = model.predict(images, verbose=0)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, **TOL)
