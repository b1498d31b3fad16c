"""Embedding tables sharded by rows with keras.distribution.ModelParallel.

JAX: a plain `Embedding` and a `GrowableEmbedding` (growing inside `fit`)
split by rows over 4 virtual CPU devices train to the weights of one
device; a grown table stays sharded and its capacity a multiple of the
shards; `.keras` files move between sharded and unsharded models.
TensorFlow and torch: what `keras.distribution` does there is pinned.
"""

import keras
import numpy as np
import pytest

import kmodels
from backends_tests.distributed.conftest import max_abs_difference
from backends_tests.distributed.conftest import weights_of
from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding

BACKEND = keras.backend.backend()
VOCAB, DIM, EXAMPLES, BATCH = 40, 8, 64, 16

# float32, one epoch of 4 steps. Measured 0.0 on every variable (meshes
# (1, 4) and (2, 2), DataParallel): XLA:CPU kept the reduction order. A
# cross-device sum may reorder float32 additions on other hardware or XLA
# versions (~1e-7 relative per step); 1e-6 allows that and nothing more.
PARITY_ATOL = 1e-6


def _data(sort=False):
    rng = np.random.default_rng(0)
    x = rng.integers(0, VOCAB, (EXAMPLES, 5)).astype("int32")
    if sort:
        # Ids grow over the epoch, so the table grows during fit.
        x = np.sort(x, axis=0)
    y = rng.normal(size=(EXAMPLES, 1)).astype("float32")
    return x, y


def _mesh(shape):
    # Devices named by hand: torch cannot list them (pinned below).
    devices = [f"cpu:{i}" for i in range(4)]
    return keras.distribution.DeviceMesh(shape, ("batch", "model"), devices)


def _model_parallel(shape, *tables):
    layout_map = keras.distribution.LayoutMap(_mesh(shape))
    kmodels.distributed.shard_embedding_rows(layout_map, *tables)
    return keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name="batch"
    )


def _plain():
    return keras.layers.Embedding(VOCAB, DIM, name="table")


def _growable(initial_capacity=4, **kwargs):
    return GrowableEmbedding(
        DIM, initial_capacity=initial_capacity, seed=3, name="table", **kwargs
    )


def _train(distribution, make_table, sort=False, spy=None):
    """One epoch of `fit` (same global batch) under `distribution` (or on
    one device for `None`); returns the model, its table and callback."""
    keras.utils.clear_session()
    keras.utils.set_random_seed(1)
    scope = distribution.scope() if distribution else _no_scope()
    with scope:
        ids = keras.Input((5,), dtype="int32")
        table = make_table()
        pooled = keras.layers.GlobalAveragePooling1D()(table(ids))
        model = keras.Model(ids, keras.layers.Dense(1, name="head")(pooled))
        model.compile(keras.optimizers.Adam(0.01), loss="mse")
    callbacks = []
    if isinstance(table, GrowableEmbedding):
        callbacks.append(EmbeddingGrowth())
        if spy is not None:
            grow_to = table.grow_to

            def spied(capacity):
                grow_to(capacity)
                spy(table)

            table.grow_to = spied
    x, y = _data(sort)
    model.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    return model, table, callbacks


def _data_parallel():
    return keras.distribution.DataParallel(
        devices=[f"cpu:{i}" for i in range(4)]
    )


class _no_scope:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def _layout(value):
    """(partition spec, rows held by each device) of a JAX array."""
    return (
        tuple(value.sharding.spec),
        [shard.data.shape[0] for shard in value.addressable_shards],
    )


def _rows(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable.value))


def _assert_ignored(variable):
    """TensorFlow and torch: Keras never asks the distribution for the
    variable's layout, so it is one whole variable on one device."""
    assert variable._layout is None
    if BACKEND == "tensorflow":
        assert variable.value.device.endswith("CPU:0")
    else:
        assert str(variable.value.device) == "cpu"


def test_default_device_mesh_fails_on_torch_only():
    # Keras has no torch distribution backend: a mesh or a DataParallel
    # over the default devices fails while listing them. (Elsewhere they
    # are built over the 4 virtual devices.)
    makers = [
        lambda: keras.distribution.DeviceMesh((1, 4), ("batch", "model")),
        keras.distribution.DataParallel,
    ]
    for make in makers:
        if BACKEND == "torch":
            with pytest.raises(AttributeError, match="list_devices"):
                make()
        else:
            made = make()
            mesh = getattr(made, "device_mesh", made)
            assert mesh.devices.size == 4


@pytest.fixture(scope="module")
def one_device_plain():
    return weights_of(_train(None, _plain)[0])


@pytest.fixture(scope="module")
def one_device_growth():
    """Weights and growth log of the one-device run that the growing
    tests compare with (trained once for the module)."""
    model, _, growth = _train(None, _growable, sort=True)
    return weights_of(model), growth[0].log


@pytest.fixture(scope="module")
def sharded_growth():
    """The same run with the table sharded by rows over 4 devices (JAX),
    and the table's layout recorded right after each growth."""
    seen = []

    def spy(table):
        # Right after the growth, before the next step runs.
        seen.append(
            [
                (table.capacity,)
                + (_layout(v.value) if BACKEND == "jax" else (v._layout,))
                for v in [table.embeddings, *table.slot_variables]
            ]
        )

    model, _, growth = _train(
        _model_parallel((1, 4), "table"), _growable, sort=True, spy=spy
    )
    return model, weights_of(model), growth[0].log, seen


@pytest.mark.parametrize("shape", [(1, 4), (2, 2)])
def test_plain_embedding_sharded_by_rows_trains_as_one_device(
    device_count, one_device_plain, shape
):
    expected = one_device_plain
    model, table, _ = _train(_model_parallel(shape, "table"), _plain)
    difference = max_abs_difference(weights_of(model), expected)
    if BACKEND != "jax":
        # The layout map is ignored (Keras' TensorFlow distribution code is
        # a DTensor prototype marked "DO NOT USE"; torch has none): fit is
        # the one-device run, exactly.
        _assert_ignored(table.embeddings)
        assert difference == 0.0
        return
    shards = shape[1]
    assert _layout(table.embeddings.value) == (
        ("model", None),
        [VOCAB // shards] * device_count,
    )
    # Keras gives the model optimizer's slots the layout of their variable.
    slots = [
        v
        for v in model.optimizer.variables
        if v.path.startswith("adam/table_embeddings")
    ]
    assert len(slots) == 2
    for slot in slots:
        assert _layout(slot.value) == _layout(table.embeddings.value)
    assert difference <= PARITY_ATOL


def test_growable_embedding_grows_sharded_as_one_device(
    device_count, one_device_growth, sharded_growth
):
    one_weights, one_log = one_device_growth
    model, weights, log, seen = sharded_growth
    assert log == one_log
    capacities = [entry["to"] for entry in log]
    assert capacities == [16, 32, 64]
    assert len(seen) == len(capacities)
    assert max_abs_difference(weights, one_weights) <= PARITY_ATOL
    table = model.get_layer("table")
    if BACKEND != "jax":
        for variable in [table.embeddings, *table.slot_variables]:
            _assert_ignored(variable)
        assert table.row_multiple == 1
        assert seen == [[(capacity, None)] * 3 for capacity in capacities]
        return
    for capacity, after in zip(capacities, seen):
        expected = (capacity, ("model", None), [capacity // 4] * 4)
        assert after == [expected] * 3


def test_growable_embedding_data_parallel_as_one_device(
    device_count, one_device_growth
):
    one_weights, one_log = one_device_growth
    model, table, growth = _train(_data_parallel(), _growable, sort=True)
    assert growth[0].log == one_log
    assert table.row_multiple == 1
    assert max_abs_difference(weights_of(model), one_weights) <= PARITY_ATOL
    if BACKEND != "jax":
        _assert_ignored(table.embeddings)
        return
    # Replicated: every device holds the whole grown table.
    spec, rows = _layout(table.embeddings.value)
    assert all(axis is None for axis in spec)
    assert rows == [table.capacity] * device_count


def test_keras_file_moves_between_sharded_and_one_device(
    tmp_path, sharded_growth
):
    model, expected, _, _ = sharded_growth
    path = str(tmp_path / "sharded.keras")
    model.save(path)
    keras.utils.clear_session()
    loaded = keras.saving.load_model(path)
    table = loaded.get_layer("table")
    assert table.capacity == 64
    if BACKEND == "jax":
        assert len(table.embeddings.value.sharding.device_set) == 1
    assert max_abs_difference(weights_of(loaded), expected) == 0.0

    # Saved with 6 rows on one device, loaded on 4 shards: padded to 8
    # with the rows growth would have added (TensorFlow, torch: 6 rows,
    # nothing is sharded).
    keras.utils.clear_session()
    ids = keras.Input((5,), dtype="int32")
    small = keras.Model(ids, _growable(initial_capacity=6)(ids))
    small_path = str(tmp_path / "six_rows.keras")
    small.save(small_path)
    saved = _rows(small.get_layer("table").embeddings)
    with _model_parallel((1, 4), "table").scope():
        padded = keras.saving.load_model(small_path).get_layer("table")
    rows = 8 if BACKEND == "jax" else 6
    assert padded.capacity == rows
    presized = _growable(initial_capacity=rows)
    presized.build()
    np.testing.assert_array_equal(_rows(padded.embeddings)[:6], saved)
    np.testing.assert_array_equal(
        _rows(padded.embeddings), _rows(presized.embeddings)
    )
    if BACKEND == "jax":
        assert _layout(padded.embeddings.value) == (("model", None), [2] * 4)
    else:
        _assert_ignored(padded.embeddings)


def test_capacity_rounds_up_to_a_multiple_of_the_shards():
    keras.utils.clear_session()
    one = _growable(initial_capacity=16)
    one.build()
    with _model_parallel((1, 4), "table").scope():
        table = _growable(initial_capacity=6, growth_factor=1.5)
        table.build()
        plain = keras.layers.Embedding(6, DIM, name="table")
    if BACKEND != "jax":
        # Nothing is sharded, so nothing is rounded.
        assert (table.capacity, table.row_multiple) == (6, 1)
        _assert_ignored(table.embeddings)
        plain.build((None,))
        _assert_ignored(plain.embeddings)
        return
    # 6 rows cannot be split over 4 shards: 8, each a row of the
    # one-device table (rows depend only on (seed, row)).
    assert (table.initial_capacity, table.capacity) == (6, 8)
    assert table.row_multiple == 4
    assert _layout(table.embeddings.value) == (("model", None), [2] * 4)
    np.testing.assert_array_equal(
        _rows(table.embeddings), _rows(one.embeddings)[:8]
    )
    # Growth: 8 * 1.5 = 12 fits id 9; id 12 needs 18 -> 20.
    assert table.required_capacity(9) == 12
    assert table.required_capacity(12) == 20
    table.grow_to(13)
    assert table.capacity == 16
    assert _layout(table.embeddings.value) == (("model", None), [4] * 4)
    np.testing.assert_array_equal(
        _rows(table.embeddings), _rows(one.embeddings)
    )
    for slot in table.slot_variables:
        assert _layout(slot.value) == (("model", None), [4] * 4)
        np.testing.assert_array_equal(_rows(slot), np.zeros((16, DIM)))
    # Why the rounding: JAX refuses to shard 6 rows over 4 devices, so a
    # plain Embedding must be given a divisible input_dim.
    with _model_parallel((1, 4), "table").scope():
        with pytest.raises(
            ValueError, match="partitioned 4 times, but the dimension size is 6"
        ):
            plain.build((None,))


def test_shard_embedding_rows_entries():
    layout_map = keras.distribution.LayoutMap(_mesh((1, 4)))
    table = _growable()
    returned = kmodels.distributed.shard_embedding_rows(
        layout_map, table, "words"
    )
    assert returned is layout_map
    for path in ["table/embeddings", "model/table/velocity", "words/momentum"]:
        assert tuple(layout_map[path].axes) == ("model", None)
    for path in ["my_table/embeddings", "table/step", "head/kernel"]:
        assert layout_map[path] is None
    with pytest.raises(ValueError, match="axis 'rows' is not an axis"):
        kmodels.distributed.shard_embedding_rows(layout_map, "t", axis="rows")
