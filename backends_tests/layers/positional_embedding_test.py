"""kmodels.layers.PositionalEmbedding against the NumPy oracle, plus the
seed 003 claims it replaces."""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from kmodels.layers import PatchEmbedding
from kmodels.layers import PositionalEmbedding
from kmodels.layers.position_resampling import cubic_weights
from kmodels.layers.position_resampling import cubic_weights_tensor
from kmodels.testing import oracle
from kmodels.testing.layer_contract import run_layer_test
from kmodels.testing.oracle.position import bicubic_resample

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


# Resampling to another length (issue 32). The oracle interpolates each
# feature with np.interp at the pixel-centre coordinates of torch's
# F.interpolate(mode="linear", align_corners=False); the layer applies a
# float32 matrix of two nonzero weights per row: float32 rounding (~1e-7).
RESIZE_TOL = dict(rtol=1e-6, atol=1e-6)


def _interpolated(table, new):
    old = table.shape[0]
    coordinates = (np.arange(new) + 0.5) * old / new - 0.5
    return np.stack(
        [
            np.interp(coordinates, np.arange(old), table[:, d])
            for d in range(table.shape[1])
        ],
        axis=-1,
    )


@pytest.mark.parametrize("new", [3, 9, 14])
def test_resized_interpolates_learned_positions_linearly(rng, new):
    layer = _layer("learned", "add")
    table = rng.normal(size=(9, 4)).astype("float32")
    layer.position_embedding.position_embeddings.assign(table)
    resized = layer.resized(new)
    got = np_(resized.position_embedding.position_embeddings)
    assert got.shape == (new, 4)
    np.testing.assert_allclose(got, _interpolated(table, new), **RESIZE_TOL)
    # The same wrapped layer (weights shared), this layer untouched.
    assert resized.embedding is layer.embedding
    np.testing.assert_array_equal(
        np_(layer.position_embedding.position_embeddings), table
    )
    assert layer.sequence_length == 9 and resized.sequence_length == new
    # Output: the embedding plus the interpolated row of each position.
    ids = IDS[:, : min(new, IDS.shape[1])]
    expected = np_(layer.embedding(ids)) + got[: ids.shape[1]]
    np.testing.assert_allclose(np_(resized(ids)), expected, **LEARNED_TOL)


def test_resized_to_the_same_length_is_exact_and_sine_is_recomputed(rng):
    layer = _layer("learned", "concat")
    table = rng.normal(size=(9, 4)).astype("float32")
    layer.position_embedding.position_embeddings.assign(table)
    np.testing.assert_array_equal(
        np_(layer.resized(9).position_embedding.position_embeddings), table
    )
    sine = _layer("sine", "add")
    longer = sine.resized(20)
    ids = np.tile(IDS, (1, 2))[:, :14]
    # Sine positions of a longer input: the same formula, further on.
    np.testing.assert_allclose(
        np_(longer(ids)),
        np_(sine.embedding(ids)) + oracle.sine_position_encoding(14, 4),
        **SINE_TOL,
    )
    with pytest.raises(ValueError, match="sequence_length"):
        layer.resized(0)


def test_resized_model_loads_then_fine_tunes_at_a_new_length(rng, tmp_path):
    # Trained at length 6, saved, loaded, resized to 10, then one compiled
    # fit step and predict at the new length.
    def model_at(embedding_layer, length):
        ids = keras.Input((length,), dtype="int32")
        x = embedding_layer(ids)
        x = keras.layers.GlobalAveragePooling1D()(x)
        return keras.Model(ids, keras.layers.Dense(2, name="head")(x))

    layer = PositionalEmbedding(
        keras.layers.Embedding(10, 4), sequence_length=6, name="positions"
    )
    model = model_at(layer, 6)
    model.compile(keras.optimizers.SGD(0.1), "mse")
    x6 = rng.integers(0, 10, (8, 6))
    model.fit(x6, rng.normal(size=(8, 2)), epochs=1, verbose=0)
    path = str(tmp_path / "at6.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    trained = np_(
        loaded.get_layer("positions").position_embedding.position_embeddings
    )
    longer = loaded.get_layer("positions").resized(10)
    new_model = model_at(longer, 10)
    new_model.get_layer("head").set_weights(
        loaded.get_layer("head").get_weights()
    )
    np.testing.assert_allclose(
        np_(longer.position_embedding.position_embeddings),
        _interpolated(trained, 10),
        **RESIZE_TOL,
    )
    new_model.compile(keras.optimizers.SGD(0.1), "mse")
    x10 = rng.integers(0, 10, (8, 10))
    before = np_(longer.position_embedding.position_embeddings)
    history = new_model.fit(x10, rng.normal(size=(8, 2)), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    # The resampled positions train (every row gets a gradient).
    after = np_(longer.position_embedding.position_embeddings)
    assert np.all(np.abs(after - before).max(axis=-1) > 0)
    assert new_model.predict(x10, verbose=0).shape == (8, 2)
    # The fine-tuned model saves and loads at its new length.
    new_path = str(tmp_path / "at10.keras")
    new_model.save(new_path)
    again = keras.saving.load_model(new_path)
    assert again.get_layer("positions").sequence_length == 10
    np.testing.assert_array_equal(
        np_(
            again.get_layer("positions").position_embedding.position_embeddings
        ),
        after,
    )
    np.testing.assert_allclose(
        np_(again.predict(x10, verbose=0)),
        np_(new_model.predict(x10, verbose=0)),
        **LEARNED_TOL,
    )


# The pixel-by-pixel reference of torch's bicubic, align_corners=False.
_bicubic_oracle = bicubic_resample


@pytest.mark.parametrize(
    "new, grid", [((6, 5), (6, 5)), (36, (6, 6)), ((2, 3), (2, 3))]
)
def test_resized_resamples_a_patch_grid_bicubic(rng, new, grid):
    # A 4x4 grid of patches (8x8 images, patches of 2) resampled to another
    # grid: against the pixel-by-pixel oracle; then images of the new size.
    layer = PositionalEmbedding(PatchEmbedding(2, 4), sequence_length=16)
    layer.build((None, 8, 8, 3))
    table = rng.normal(size=(16, 4)).astype("float32")
    layer.position_embedding.position_embeddings.assign(table)
    resized = layer.resized(new)
    got = np_(resized.position_embedding.position_embeddings)
    expected = _bicubic_oracle(table.reshape(4, 4, 4), *grid)
    np.testing.assert_allclose(got, expected.reshape(-1, 4), **RESIZE_TOL)
    assert resized.sequence_length == grid[0] * grid[1]
    images = rng.normal(size=(2, 2 * grid[0], 2 * grid[1], 3)).astype("float32")
    np.testing.assert_allclose(
        np_(resized(images)),
        np_(layer.embedding(images)) + got,
        **LEARNED_TOL,
    )
    # The same grid is the same table, exactly; this layer is untouched.
    np.testing.assert_array_equal(
        np_(layer.resized((4, 4)).position_embedding.position_embeddings),
        table,
    )
    np.testing.assert_array_equal(
        np_(layer.position_embedding.position_embeddings), table
    )


def test_resized_patch_grids_that_are_not_square(rng):
    # A 3x4 grid (6x8 images): the trained grid must be given.
    layer = PositionalEmbedding(PatchEmbedding(2, 4), sequence_length=12)
    layer.build((None, 6, 8, 3))
    table = rng.normal(size=(12, 4)).astype("float32")
    layer.position_embedding.position_embeddings.assign(table)
    with pytest.raises(ValueError, match="got 12, which is not a square"):
        layer.resized((6, 8))
    with pytest.raises(ValueError, match=r"hold the layer's 12 positions"):
        layer.resized((6, 8), from_grid=(4, 4))
    with pytest.raises(ValueError, match="got 10, which is not a square"):
        layer.resized(10, from_grid=(3, 4))
    resized = layer.resized((6, 8), from_grid=(3, 4))
    expected = _bicubic_oracle(table.reshape(3, 4, 4), 6, 8)
    np.testing.assert_allclose(
        np_(resized.position_embedding.position_embeddings),
        expected.reshape(-1, 4),
        **RESIZE_TOL,
    )


# Images of any size (issue 32, item 2): around a PatchEmbedding with
# dynamic_image_size=True the learned grid is resampled bicubic at every
# call. Reference: the pixel-by-pixel NumPy bicubic (oracle.position), the
# NumPy patch oracle. The layer applies float32 separable weights (a
# float32 rounding of the float64 weights, ~5e-7, times |positions| < 3,
# over 16 terms): 1e-5 is the stated bound.
DYNAMIC_TOL = dict(rtol=1e-5, atol=1e-5)


def _dynamic(class_token, grid=(3, 4), position="learned", merge="add"):
    layer = PositionalEmbedding(
        PatchEmbedding(2, 4, dynamic_image_size=True, class_token=class_token),
        sequence_length=grid[0] * grid[1] + class_token,
        grid=None if grid[0] == grid[1] else grid,
        position=position,
        merge=merge,
    )
    layer.build((None, 2 * grid[0], 2 * grid[1], 3))
    return layer


def _dynamic_expected(layer, weights, images, new_grid, trained_grid):
    prefix = int(layer.embedding.class_token)
    table = weights["embeddings"]
    grid = table[prefix:].reshape(*trained_grid, -1)
    positions = np.concatenate(
        [table[:prefix], bicubic_resample(grid, *new_grid).reshape(-1, 4)]
    )
    patches = oracle.patch_embedding(
        images,
        weights["kernel"],
        weights["bias"],
        2,
        class_token=weights.get("class_token"),
    )
    if layer.merge == "add":
        return patches + positions
    return np.concatenate(
        [patches, np.broadcast_to(positions, patches.shape)], -1
    )


@pytest.mark.parametrize(
    "class_token, merge, size, new_grid",
    [
        (False, "add", (10, 6), (5, 3)),  # taller, narrower
        (True, "concat", (6, 8), (3, 4)),  # the trained grid
    ],
)
def test_dynamic_grid_matches_oracle(
    rng, randomize, class_token, merge, size, new_grid
):
    layer = _dynamic(class_token, merge=merge)
    weights = {
        w.path.split("/")[-1]: v
        for w, v in zip(layer.weights, randomize(layer, scale=1.0))
    }
    images = rng.uniform(size=(2, *size, 3)).astype("float32")
    out = np_(layer(images))
    expected = _dynamic_expected(layer, weights, images, new_grid, (3, 4))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, **DYNAMIC_TOL)
    if new_grid == (3, 4):
        # The trained grid: the table itself, not a resampling of it.
        positions = np_(layer.position_embedding.position_embeddings)
        embedded = np_(layer.embedding(images))
        np.testing.assert_array_equal(
            out[..., 4:], np.broadcast_to(positions, embedded.shape)
        )


@pytest.mark.skipif(
    keras.backend.backend() == "jax",
    reason="JAX shapes are always known at trace time, so the layer never "
    "uses these weights there; eager JAX would compile its ~30 ops one by "
    "one for each shape (~4 s)",
)
def test_cubic_weights_tensor_matches_numpy():
    """The keras.ops weights, for sizes TensorFlow only knows when the graph
    runs (given here as tensors), against the float64 NumPy matrix."""
    # One `new` for all (eager JAX compiles each op once per shape).
    for old, new in [(4, 6), (9, 6), (6, 6)]:
        got = np_(cubic_weights_tensor(old, keras.ops.convert_to_tensor(new)))
        expected = cubic_weights(old, new)
        assert got.shape == (new, old)
        if old == new:
            np.testing.assert_array_equal(got, np.eye(old))
        # float32 sampling positions and kernel: measured ~7e-7.
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6)


def test_dynamic_sine_positions_are_computed_for_each_length(rng):
    layer = PositionalEmbedding(
        PatchEmbedding(2, 4, dynamic_image_size=True, class_token=True),
        sequence_length=5,
        position="sine",
    )
    images = rng.uniform(size=(1, 6, 8, 3)).astype("float32")
    out = np_(layer(images))  # 1 + 12 positions, more than 5
    expected = np_(layer.embedding(images)) + oracle.sine_position_encoding(
        13, 4
    )
    np.testing.assert_allclose(out, expected, **SINE_TOL)


def test_dynamic_grid_errors():
    patches = PatchEmbedding(2, 4, dynamic_image_size=True, class_token=True)
    cases = [
        (
            dict(embedding=patches, sequence_length=13),
            "learned positions resampled to each image size form a grid of "
            "patches; sequence_length=13 (1 class token and 12 patches) is "
            "not a square grid: pass grid=(rows, cols).",
        ),
        (
            dict(embedding=patches, sequence_length=13, grid=(4, 4)),
            "`grid` (4, 4) holds 16 positions; sequence_length=13 (1 class "
            "token and 12 patches) holds 12 patch positions.",
        ),
        (
            dict(
                embedding=keras.layers.Embedding(10, 4),
                sequence_length=12,
                grid=(3, 4),
            ),
            "`grid` is the patch grid of a PatchEmbedding; the embedding is "
            "a Embedding: leave grid=None.",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError) as e:
            PositionalEmbedding(**kwargs)
        assert str(e.value) == f"PositionalEmbedding: {message}"
    layer = PositionalEmbedding(patches, sequence_length=13, grid=(3, 4))
    with pytest.raises(ValueError) as e:
        layer(np.zeros((1, 6, 8, 3), "float32"), start_index=1)
    assert str(e.value) == (
        "PositionalEmbedding: `start_index` must be 0 around a "
        "PatchEmbedding with dynamic_image_size=True (its positions are a "
        "grid of patches); got 1."
    )


def test_dynamic_layer_contract(rng):
    """Config (with `grid`) and .keras round trips, symbolic vs eager,
    mixed precision, a training step, with images of another size than the
    trained grid's (2x3 trained, 2x2 called: the grid is resampled)."""
    images = rng.uniform(size=(2, 4, 4, 1)).astype("float32")
    run_layer_test(
        PositionalEmbedding,
        dict(
            embedding=PatchEmbedding(
                2, 4, dynamic_image_size=True, class_token=True
            ),
            sequence_length=7,
            grid=(2, 3),
        ),
        input_data=images,
        expected_output_shape=(2, 5, 4),
        expected_output_dtype="float32",
        # Class token, patch kernel and bias, position table.
        expected_num_trainable_weights=4,
        expected_num_non_trainable_weights=0,
        expected_mask=False,
        tolerance=0,
    )


def test_dynamic_keras_file_runs_at_another_size(rng, tmp_path):
    layer = _dynamic(True)
    inputs = keras.Input((None, None, 3))
    model = keras.Model(inputs, layer(inputs))
    layer.position_embedding.position_embeddings.assign(
        rng.normal(size=(13, 4)).astype("float32")
    )
    path = str(tmp_path / "dynamic.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    images = rng.uniform(size=(2, 10, 6, 3)).astype("float32")
    # Same weights, same ops, eager: identical outputs.
    np.testing.assert_array_equal(np_(loaded(images)), np_(model(images)))
    assert loaded.layers[-1].get_config() == layer.get_config()


def test_resized_keeps_the_class_token_position(rng):
    layer = PositionalEmbedding(
        PatchEmbedding(2, 4, class_token=True), sequence_length=17
    )
    layer.build((None, 8, 8, 3))
    table = rng.normal(size=(17, 4)).astype("float32")
    layer.position_embedding.position_embeddings.assign(table)
    resized = layer.resized((3, 5))
    got = np_(resized.position_embedding.position_embeddings)
    assert resized.sequence_length == 16 and resized.grid == (3, 5)
    np.testing.assert_array_equal(got[0], table[0])
    expected = bicubic_resample(table[1:].reshape(4, 4, 4), 3, 5)
    np.testing.assert_allclose(got[1:], expected.reshape(-1, 4), **RESIZE_TOL)


# Done when: a tiny ViT trained at 32x32 runs fit and predict at 48x48,
# compiled (each backend's default), and agrees with a NumPy computation.
def _vit_oracle(w, images, trained_grid, new_grid):
    """Patches (+ class token) + the trained table's grid resampled
    pixel by pixel + one post-norm encoder block + mean + Dense, float64."""
    x = oracle.patch_embedding(
        images, w["kernel"], w["bias"], 8, class_token=w["class_token"]
    )
    table = w["embeddings"]
    grid = bicubic_resample(table[1:].reshape(*trained_grid, -1), *new_grid)
    x = x + np.concatenate([table[:1], grid.reshape(-1, table.shape[-1])])

    def get(part):
        return [v for p, v in w["encoder"] if f"/{part}/" in p]

    x = oracle.transformer_encoder(
        x,
        get("self_attention_layer"),
        get("self_attention_layer_norm"),
        get("feedforward_intermediate_dense"),
        get("feedforward_output_dense"),
        get("feedforward_layer_norm"),
    )
    return oracle.dense(x.mean(1), *w["head"])


@pytest.fixture(scope="module")
def tiny_vit():
    """Trained one epoch at 32x32 (4x4 patches of 8), one at 48x48 (6x6),
    then predicting at 48x48; the results as NumPy arrays."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    inputs = keras.Input((None, None, 3))
    positions = PositionalEmbedding(
        PatchEmbedding(8, 8, dynamic_image_size=True, class_token=True),
        sequence_length=1 + 4 * 4,
        name="positions",
    )
    x = keras_hub.layers.TransformerEncoder(16, 2, name="encoder")(
        positions(inputs)
    )
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(inputs, keras.layers.Dense(2, name="head")(x))
    # SGD: the cheapest step to compile (Adam doubles JAX's compile time).
    model.compile(
        keras.optimizers.SGD(0.1),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x32 = rng.uniform(size=(4, 32, 32, 3)).astype("float32")
    x48 = rng.uniform(size=(4, 48, 48, 3)).astype("float32")
    y = rng.integers(0, 2, 4)
    model.fit(x32, y, batch_size=4, epochs=1, verbose=0)
    table = positions.position_embedding.position_embeddings
    trained = np_(table)
    # A second size: TensorFlow retraces the step with unknown sizes (the
    # bicubic weights are then computed with keras.ops), JAX compiles the
    # new shape, torch runs it.
    history = model.fit(x48, y, batch_size=4, epochs=1, verbose=0)
    weights = {
        w.path.split("/")[-1]: np_(w).astype(np.float64)
        for w in positions.weights
    }
    weights["encoder"] = [
        (w.path, np_(w).astype(np.float64))
        for w in model.get_layer("encoder").weights
    ]
    weights["head"] = [np_(w) for w in model.get_layer("head").weights]
    return dict(
        trained=trained,
        tuned=np_(table),
        loss=history.history["loss"][0],
        compiled=model.predict(x48, batch_size=4, verbose=0),
        expected=_vit_oracle(weights, x48, (4, 4), (6, 6)),
    )


def test_tiny_vit_trained_at_32_runs_fit_and_predict_at_48(tiny_vit):
    assert tiny_vit["compiled"].shape == (4, 2)
    # float32 (resampling weights, attention, layer norms) against float64:
    # measured <= 1e-6; 1e-5 is the stated bound.
    np.testing.assert_allclose(
        tiny_vit["compiled"], tiny_vit["expected"], rtol=1e-5, atol=1e-5
    )


def test_tiny_vit_fit_at_48_trains_the_grid_through_the_resampling(tiny_vit):
    # Every row of the 4x4 grid (and the class token's) moved in the fit
    # at 48x48; the table kept its trained shape.
    assert np.isfinite(tiny_vit["loss"])
    assert tiny_vit["tuned"].shape == (17, 8)
    moved = np.abs(tiny_vit["tuned"] - tiny_vit["trained"]).max(axis=-1)
    assert np.all(moved > 0), moved
