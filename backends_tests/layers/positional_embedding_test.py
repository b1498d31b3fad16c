"""kmodels.layers.PositionalEmbedding against the NumPy oracle, plus the
seed 003 claims it replaces."""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from kmodels.layers import PatchEmbedding
from kmodels.layers import PositionalEmbedding
from kmodels.testing import oracle
from kmodels.testing.layer_contract import run_layer_test

np_ = keras.ops.convert_to_numpy

# Learned positions are a lookup plus one float32 add: the float64 oracle
# agrees to float32 rounding of values below 1 (~6e-8); 1e-6 leaves margin.
LEARNED_TOL = dict(rtol=1e-6, atol=1e-6)
# Sine positions are computed in float32 (power, product, sin/cos of angles
# up to ~10 rad): measured error ~1e-6; 1e-5 is the stated bound.
SINE_TOL = dict(rtol=1e-5, atol=1e-5)

IDS = np.array([[3, 1, 4, 1, 5, 0, 0], [2, 7, 1, 8, 2, 8, 1]], "int32")


def _layer(position, merge, mask_zero=True, sequence_length=9):
    layer = PositionalEmbedding(
        keras.layers.Embedding(10, 4, mask_zero=mask_zero),
        sequence_length=sequence_length,
        position=position,
        merge=merge,
    )
    layer.build(IDS.shape)
    return layer


def _weights_by_name(layer, values):
    return {w.path.split("/")[-2]: v for w, v in zip(layer.weights, values)}


def _expected(layer, weights, ids, start_index=0):
    tokens = oracle.embedding(ids, weights["embedding"])
    length = ids.shape[1]
    if layer.position == "learned":
        pos = oracle.learned_position_embedding(
            weights["position_embedding"], length, start_index
        )
    else:
        pos = oracle.sine_position_encoding(
            length, tokens.shape[-1], start_index=start_index
        )
    pos = np.broadcast_to(pos, tokens.shape)
    if layer.merge == "add":
        return tokens + pos
    return np.concatenate([tokens, pos], axis=-1)


@pytest.mark.parametrize("position", ["learned", "sine"])
@pytest.mark.parametrize("merge", ["add", "concat"])
def test_matches_oracle(position, merge, randomize, parity):
    layer = _layer(position, merge)
    weights = _weights_by_name(layer, randomize(layer))
    out = np_(layer(IDS))
    tol = LEARNED_TOL if position == "learned" else SINE_TOL
    expected = _expected(layer, weights, IDS)
    assert out.shape == (2, 7, 4 if merge == "add" else 8)
    np.testing.assert_allclose(out, expected, **tol)
    parity.record(f"position/{position}_{merge}", out, **tol)


@pytest.mark.parametrize("position", ["learned", "sine"])
def test_start_index_matches_full_sequence(position, randomize):
    """Step-by-step decoding: token t embedded alone with start_index=t is
    row t of the whole sequence."""
    layer = _layer(position, "add")
    weights = _weights_by_name(layer, randomize(layer))
    full = np_(layer(IDS))
    tol = LEARNED_TOL if position == "learned" else SINE_TOL
    for t in range(IDS.shape[1]):
        step = np_(layer(IDS[:, t : t + 1], start_index=t))
        np.testing.assert_allclose(step[:, 0], full[:, t], **tol)
        expected = _expected(layer, weights, IDS[:, t : t + 1], t)
        np.testing.assert_allclose(step, expected, **tol)


def test_matches_token_and_position_embedding(randomize):
    """learned + add + Embedding is keras-hub's TokenAndPositionEmbedding."""
    ours = _layer("learned", "add", mask_zero=False)
    theirs = keras_hub.layers.TokenAndPositionEmbedding(10, 9, 4)
    theirs.build(IDS.shape)
    randomize(ours)
    theirs.set_weights(ours.get_weights())
    # Same ops on the same float32 values: bit-identical.
    np.testing.assert_array_equal(np_(ours(IDS)), np_(theirs(IDS)))


def test_propagates_the_wrapped_layers_mask():
    layer = _layer("learned", "add")
    expected = IDS != 0
    np.testing.assert_array_equal(np_(layer.compute_mask(IDS)), expected)
    out = layer(IDS)
    np.testing.assert_array_equal(
        np_(keras.src.backend.get_keras_mask(out)), expected
    )
    # And through a functional model to a mask-consuming layer.
    inputs = keras.Input((7,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(layer(inputs))
    model = keras.Model(inputs, pooled)
    embedded = np_(layer(IDS))
    expected_mean = (embedded * expected[..., None]).sum(1) / expected.sum(
        1, keepdims=True
    )
    np.testing.assert_allclose(
        np_(model(IDS)), expected_mean, rtol=1e-6, atol=1e-6
    )


def test_no_mask_without_mask_zero():
    layer = _layer("learned", "add", mask_zero=False)
    assert layer.compute_mask(IDS) is None
    assert keras.src.backend.get_keras_mask(layer(IDS)) is None


def test_wraps_a_patch_embedding(rng):
    layer = PositionalEmbedding(
        PatchEmbedding(2, 6), sequence_length=16, position="sine"
    )
    images = rng.uniform(size=(2, 8, 8, 1)).astype("float32")
    out = np_(layer(images))
    assert out.shape == (2, 16, 6)
    patches = np_(layer.embedding(images))
    expected = patches + oracle.sine_position_encoding(16, 6)
    np.testing.assert_allclose(out, expected, **SINE_TOL)


@pytest.mark.parametrize(
    "position, merge", [("learned", "add"), ("sine", "concat")]
)
def test_layer_contract(position, merge):
    """Config and .keras round trips, symbolic vs eager, precision, and
    one training step that updates every table (the learned positions
    too)."""
    run_layer_test(
        PositionalEmbedding,
        dict(
            embedding=keras.layers.Embedding(10, 4, mask_zero=True),
            sequence_length=9,
            position=position,
            merge=merge,
        ),
        input_data=IDS,
        expected_output_shape=(2, 7, 4 if merge == "add" else 8),
        expected_output_dtype="float32",
        expected_num_trainable_weights=2 if position == "learned" else 1,
        expected_num_non_trainable_weights=0,
        supports_masking=True,
        expected_mask=IDS != 0,
        # Same weights, same ops: identical outputs after a .keras round
        # trip.
        tolerance=0,
    )


def test_layer_contract_over_image_patches(rng):
    """The image variant of `transformer_encoder`: learned positions over
    the patches of a `PatchEmbedding` (float inputs, no mask)."""
    images = rng.uniform(size=(2, 4, 4, 1)).astype("float32")
    run_layer_test(
        PositionalEmbedding,
        dict(embedding=PatchEmbedding(2, 6), sequence_length=4),
        input_data=images,
        expected_output_shape=(2, 4, 6),
        expected_output_dtype="float32",
        # Patch kernel and bias, position table.
        expected_num_trainable_weights=3,
        expected_num_non_trainable_weights=0,
        expected_mask=False,
        tolerance=0,
    )


@pytest.mark.parametrize("position", ["learned", "sine"])
@pytest.mark.parametrize("merge", ["add", "concat"])
def test_config_keeps_the_wrapped_embedding(position, merge):
    layer = _layer(position, merge)
    config = layer.get_config()
    assert config["embedding"]["class_name"] == "Embedding"
    clone = PositionalEmbedding.from_config(config)
    assert clone.get_config() == config
    assert isinstance(clone.embedding, keras.layers.Embedding)
    assert clone.embedding.mask_zero
    assert clone.compute_output_shape((2, 7)) == layer.compute_output_shape(
        (2, 7)
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(position="rope"),
            "`position` must be one of ('learned', 'sine'); got 'rope'",
        ),
        (
            dict(merge="sum"),
            "`merge` must be one of ('add', 'concat'); got 'sum'",
        ),
        (dict(sequence_length=0), "integer >= 1; got 0 (int)"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = dict(embedding=keras.layers.Embedding(10, 4), sequence_length=9)
    args.update(kwargs)
    with pytest.raises(ValueError) as e:
        PositionalEmbedding(**args)
    assert message in str(e.value)


def test_embedding_must_be_a_layer():
    with pytest.raises(TypeError, match="got int"):
        PositionalEmbedding(10, sequence_length=9)


def test_too_long_input():
    layer = PositionalEmbedding(keras.layers.Embedding(10, 4), 5)
    with pytest.raises(ValueError) as e:
        layer(IDS)
    assert "holds 5 positions (`sequence_length`); the inputs have 7" in str(
        e.value
    )


# The seed's two suggested fixes, pinned so the docs' claims stay true.


def test_seed_fix_2_merge_mode_does_not_exist():
    with pytest.raises(ValueError) as e:
        keras_hub.layers.PositionEmbedding(sequence_length=7, merge_mode="add")
    assert "Unrecognized keyword arguments" in str(e.value)
    assert "merge_mode" in str(e.value)


def test_seed_fix_1_position_embedding_on_arange_raises():
    """PositionEmbedding wants the embedded (batch, seq, dim) tensor; on the
    1-D `arange(seq_len)` of the seed it fails in build, with the same
    IndexError on every backend (it reads `shape[-2]` of a 1-D shape)."""
    layer = keras_hub.layers.PositionEmbedding(sequence_length=7)
    with pytest.raises(IndexError, match="tuple index out of range"):
        layer(ops.arange(7))
