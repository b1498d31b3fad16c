"""Data-parallel training with `keras.distribution.DataParallel`.

JAX: the `Translator` (GRUs, attention, `masked_loss`) and the Transformer
encoder classifier, unchanged, train on 4 (and 2) virtual CPU devices to
the weights of one device with the same global batch; variables are
replicated and every batch is split along its first axis; `.keras` files,
`generate`, `evaluate` and `predict` carry over; a batch that the devices
cannot split evenly raises (and can cost `predict` the model's weights).
TensorFlow and torch: `keras.distribution` has no data-parallel
implementation there; fit under `DataParallel` silently runs on one
device, and that is pinned.
"""

import keras
import numpy as np
import pytest

from backends_tests.distributed.conftest import max_abs_difference
from backends_tests.distributed.conftest import weights_of
from kmodels.models import transformer_encoder
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_loss

np_ = keras.ops.convert_to_numpy
BACKEND = keras.backend.backend()
# The tests are written for `tox -e distributed` (KMODELS_VIRTUAL_DEVICES=4).
DEVICES = 4
EXAMPLES, BATCH = 64, 16
VOCAB, UNITS = 20, 16
START, END = 2, 3
CONTEXT_LENGTH, TARGET_LENGTH = 7, 6
ENCODER_VOCAB, ENCODER_LENGTH, CLASSES = 30, 8, 3

# float32, one epoch = 4 Adam steps (lr 0.01; every weight moves by
# 0.01-0.04): the replicated run sums the per-device gradients with an
# all-reduce, another summation order than one device, so gradients differ
# in their last float32 bits (~1e-7 relative); Adam divides by sqrt(v) ~ |g|,
# so the weights differ by ~lr * 1e-7 per step, more where a gradient is
# small. Measured: 7e-7 (Translator), 1.5e-6 (encoder, attention key
# kernel). 5e-6 keeps a 3x margin and is 2000x below the weights' movement.
PARITY_ATOL = 5e-6

# An attention key bias has an exactly zero gradient (it adds q.b to every
# score of a query; softmax ignores a constant), so in float32 its gradient
# is rounding noise (~1e-10), which Adam (eps 1e-7) turns into steps of
# ~lr * 1e-3 that differ between the two runs. Measured: moves 1.5e-5,
# differs 2.5e-5 (encoder); 2e-7 (Translator). Real gradients move weights
# by > 1e-2, so 1e-4 still tells noise from training.
NOISE_ATOL = 1e-4


def _is_noise(path):
    return path.endswith("/key/bias")


def _data_parallel(devices=None):
    """`DataParallel` over the first `devices` devices (all by default).

    torch has no `keras.distribution` backend: `DataParallel()` (which
    lists the devices) raises there, so the device names are passed.
    """
    if BACKEND == "torch":
        names = [f"cpu:{i}" for i in range(devices or DEVICES)]
        return keras.distribution.DataParallel(devices=names)
    if devices is None:
        return keras.distribution.DataParallel()
    names = keras.distribution.list_devices()[:devices]
    mesh = keras.distribution.DeviceMesh((devices,), ["batch"], names)
    return keras.distribution.DataParallel(device_mesh=mesh)


def _translator_data():
    """Right-padded ids (0): context lengths 1..7 and target lengths 2..6
    cycle with the row, so every 16-row batch and every 4-row device
    shard mixes lengths. Target tokens come from 4 ids and only every
    other row ends with END, so after one epoch greedy generation starts
    with a real token rather than END."""
    rng = np.random.default_rng(0)
    n = EXAMPLES
    context = rng.integers(1, VOCAB, (n, CONTEXT_LENGTH)).astype("int32")
    target = rng.integers(END + 1, END + 5, (n, TARGET_LENGTH + 1))
    target = target.astype("int32")
    target[:, 0] = START
    for i in range(n):
        context[i, 1 + (i * 3) % CONTEXT_LENGTH :] = 0
        end = 2 + (i * 3) % (TARGET_LENGTH - 1)
        target[i, end] = END if i % 2 else 0
        target[i, end + 1 :] = 0
    return (context, target[:, :-1]), target[:, 1:]


def _encoder_data():
    rng = np.random.default_rng(1)
    ids = rng.integers(1, ENCODER_VOCAB, (EXAMPLES, ENCODER_LENGTH))
    ids = ids.astype("int32")
    for i in range(EXAMPLES):
        ids[i, 1 + (i * 3) % ENCODER_LENGTH :] = 0
    labels = (ids[:, 0] % CLASSES).astype("int32")
    return ids, labels


def _built(build, distribution=None):
    """`build()` from a fresh session and seed 0, inside `distribution`'s
    scope when given: the same names and initial weights every time."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    if distribution is None:
        return build()
    with distribution.scope():
        return build()


def _translator():
    (context, target_in), _ = _translator_data()
    model = Translator(
        VOCAB, VOCAB, UNITS, start_id=START, end_id=END, name="translator"
    )
    model.build((context.shape, target_in.shape))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=masked_loss)
    return model


def _encoder():
    model = transformer_encoder(
        keras.layers.Embedding(ENCODER_VOCAB, UNITS, mask_zero=True),
        (ENCODER_LENGTH,),
        num_classes=CLASSES,
        num_heads=2,
        intermediate_dim=UNITS,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _fit(model, x, y, distribution=None):
    if distribution is None:
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    else:
        with distribution.scope():
            _fit(model, x, y)


def _record_step_shardings(model):
    """Wraps the model's JAX train step so that it records, when traced,
    the sharding of every array of the batch it receives."""
    import jax

    seen = []
    step = model.train_step

    def train_step(state, data):
        for array in keras.tree.flatten(data):
            jax.debug.inspect_array_sharding(
                array,
                callback=lambda s, a=array: seen.append((a.shape, s)),
            )
        return step(state, data)

    model.train_step = train_step
    return seen


def _trained(build, x, y, distribution=None, record=False):
    """`(model, initial weights, batch shardings seen by the step or
    None)` after one epoch, under `distribution` when given."""
    model = _built(build, distribution)
    initial = weights_of(model)
    seen = _record_step_shardings(model) if record else None
    _fit(model, x, y, distribution)
    return model, initial, seen


class _Run:
    """The same model trained for one epoch on one device and under a
    data-parallel distribution over all devices."""

    def __init__(self, build, x, y):
        self.build, self.x, self.y = build, x, y
        self.distribution = _data_parallel()
        self.one, self.initial_one, _ = _trained(build, x, y)
        self.many, self.initial_many, self.step_shardings = _trained(
            build, x, y, self.distribution, record=BACKEND == "jax"
        )


@pytest.fixture(scope="module")
def translator_run(device_count):
    assert device_count == DEVICES
    return _Run(_translator, *_translator_data())


@pytest.fixture(scope="module")
def encoder_run(device_count):
    assert device_count == DEVICES
    return _Run(_encoder, *_encoder_data())


def _assert_parity(initial_one, one, initial_many, many):
    """Asserts the parity property; returns the largest difference."""
    trained_one, trained_many = weights_of(one), weights_of(many)
    # Same seed, same session state: the same initial weights, exactly.
    assert max_abs_difference(initial_one, initial_many) == 0.0
    noise = [v.path for v in one.trainable_variables if _is_noise(v.path)]
    for v in one.trainable_variables:
        moved = np.max(np.abs(trained_one[v.path] - initial_one[v.path]))
        if v.path in noise:
            assert moved < NOISE_ATOL, v.path
        else:
            # Training moved every other weight far beyond the tolerance,
            # so parity is not the trivial "nothing changed".
            assert moved > 1e-3, v.path
    difference = max_abs_difference(
        {p: a for p, a in trained_one.items() if p not in noise},
        {p: a for p, a in trained_many.items() if p not in noise},
    )
    noise_difference = max(
        (np.max(np.abs(trained_one[p] - trained_many[p])) for p in noise),
        default=0.0,
    )
    if BACKEND == "jax":
        assert difference <= PARITY_ATOL
        assert noise_difference <= NOISE_ATOL
    else:
        # keras.distribution has no data-parallel engine on this backend:
        # the distributed run is the one-device run, bit for bit.
        assert difference == 0.0
        assert noise_difference == 0.0
    return difference, noise_difference


def test_translator_trains_as_on_one_device(translator_run):
    run = translator_run
    difference, noise = _assert_parity(
        run.initial_one, run.one, run.initial_many, run.many
    )
    print(f"translator: max abs difference {difference:.3g} ({noise:.3g})")


def test_encoder_trains_as_on_one_device(encoder_run):
    run = encoder_run
    difference, noise = _assert_parity(
        run.initial_one, run.one, run.initial_many, run.many
    )
    print(f"encoder: max abs difference {difference:.3g} ({noise:.3g})")


def test_two_devices_train_as_one(encoder_run):
    run = encoder_run
    two = _data_parallel(devices=2)
    assert two.device_mesh.devices.tolist() == ["cpu:0", "cpu:1"]
    model, initial, _ = _trained(run.build, run.x, run.y, two)
    if BACKEND == "jax":
        for v in model.variables:
            assert len(v.value.sharding.device_set) == 2, v.path
    difference, noise = _assert_parity(run.initial_one, run.one, initial, model)
    print(f"encoder, 2 devices: max abs difference {difference:.3g}")


def test_variables_are_replicated_and_batches_split(translator_run):
    run = translator_run
    distribution = run.distribution
    layout = distribution.get_data_layout((BATCH, CONTEXT_LENGTH))
    assert layout.axes == ("batch", None)
    if BACKEND == "jax":
        from jax.sharding import PartitionSpec

        devices = set(run.many.variables[0].value.sharding.mesh.devices.flat)
        assert len(devices) == DEVICES
        for v in run.many.variables + run.many.optimizer.variables:
            assert v.value.sharding.is_fully_replicated, v.path
            assert v.value.sharding.device_set == devices, v.path
        assert layout.backend_layout.spec == PartitionSpec("batch", None)
        # What the compiled train step received: context, target_in and
        # target_out, each (16, t) split into 4 blocks of 4 rows.
        shapes = sorted(shape for shape, _ in run.step_shardings)
        assert shapes == [(BATCH, TARGET_LENGTH)] * 2 + [
            (BATCH, CONTEXT_LENGTH)
        ]
        for shape, sharding in run.step_shardings:
            assert dict(sharding.mesh.shape) == {"batch": DEVICES}
            assert sharding.spec[0] == "batch"
            assert all(axis is None for axis in sharding.spec[1:])
            rows = BATCH // DEVICES
            assert sharding.shard_shape(shape) == (rows,) + shape[1:]
    elif BACKEND == "tensorflow":
        # The DTensor prototype behind keras.distribution on TensorFlow
        # ("!!!DO NOT USE!!!") is not wired to variables or fit: the
        # variables are ordinary ones on the first CPU, and the mesh
        # cannot even be made without DTensor's own initialisation.
        for v in run.many.variables:
            assert v.value.device.endswith("/device:CPU:0"), v.path
        with pytest.raises(ValueError, match="Accelerators are uninit"):
            distribution.device_mesh.backend_mesh
        with pytest.raises(AttributeError, match="'distribute_tensor'"):
            keras.distribution.distribute_tensor(np.ones((4, 2)), layout)
    else:
        # torch: keras.distribution has no backend module at all.
        for v in run.many.variables:
            assert str(v.value.device) == "cpu", v.path
        with pytest.raises(AttributeError, match="no attribute '_to_back"):
            distribution.device_mesh.backend_mesh
        with pytest.raises(
            AttributeError,
            match="'NoneType' object has no attribute 'distribute_tensor'",
        ):
            keras.distribution.distribute_tensor(np.ones((4, 2)), layout)


@pytest.fixture(scope="module")
def loaded_translator(translator_run, tmp_path_factory):
    """The distributed model saved under its distribution and loaded with
    none (one device)."""
    run = translator_run
    path = str(tmp_path_factory.mktemp("translator") / "translator.keras")
    with run.distribution.scope():
        run.many.save(path)
    return keras.saving.load_model(path)


def test_keras_file_from_distributed_model_loads_on_one_device(
    translator_run, loaded_translator
):
    run, loaded = translator_run, loaded_translator
    saved, restored = run.many.get_weights(), loaded.get_weights()
    assert len(restored) == len(saved) == len(run.many.weights)
    for a, b in zip(saved, restored):
        np.testing.assert_array_equal(b, a)
    if BACKEND == "jax":
        for v in loaded.variables:
            assert len(v.value.sharding.device_set) == 1, v.path
    x, _ = _translator_data()
    with run.distribution.scope():
        expected = run.many.predict(x, batch_size=BATCH, verbose=0)
    got = loaded.predict(x, batch_size=BATCH, verbose=0)
    assert got.shape == (EXAMPLES, TARGET_LENGTH, VOCAB)
    # Identical weights; the two compiled programs (4-way SPMD, one
    # device) may order float32 reductions differently: a few ulps of
    # logits of size ~1. Measured: 7e-7 (JAX), 0 elsewhere.
    np.testing.assert_allclose(got, expected, atol=5e-6)
    print(f"logits: {np.max(np.abs(got - expected)):.3g}")


def test_generate_under_distribution_matches_one_device(
    translator_run, loaded_translator
):
    run = translator_run
    (context, _), _ = _translator_data()
    context = context[:BATCH]
    # The same trained weights on one device (the loaded copy) and
    # replicated on the mesh.
    ids, attention = loaded_translator.generate(context, max_length=5)
    with run.distribution.scope():
        ids_many, attention_many = run.many.generate(context, max_length=5)
    ids, ids_many = (keras.ops.convert_to_numpy(i) for i in (ids, ids_many))
    # Not vacuous: most rows start with a real token (measured on JAX:
    # 15 of 16 rows, ids 4 and 6).
    assert np.count_nonzero(ids[:, 0] > END) >= BATCH // 2
    np.testing.assert_array_equal(ids_many, ids)
    # Softmax outputs in [0, 1] from the same weights; only reduction
    # order may differ.
    print(
        f"attention: {np.max(np.abs(np_(attention_many) - np_(attention))):.3g}"
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(attention_many),
        keras.ops.convert_to_numpy(attention),
        atol=1e-6,
    )


@pytest.fixture(scope="module")
def encoder_copy(encoder_run):
    """A model built under the distribution holding the one-device
    model's trained weights."""
    run = encoder_run
    model = _built(run.build, run.distribution)
    model.set_weights(run.one.get_weights())
    return model


def test_evaluate_and_predict_under_distribution_match_one_device(
    encoder_run, encoder_copy
):
    run = encoder_run
    # 20 rows in batches of 8: the last batch has 4 rows, 1 per device.
    x, y = run.x[:20], run.y[:20]
    with run.distribution.scope():
        loss = encoder_copy.evaluate(x[:16], y[:16], batch_size=8, verbose=0)
        logits = encoder_copy.predict(x, batch_size=8, verbose=0)
    # The one-device reference, eagerly, with the same weights.
    expected_logits = keras.ops.convert_to_numpy(run.one(x))
    expected_loss = float(
        keras.ops.convert_to_numpy(run.one.loss(y[:16], expected_logits[:16]))
    )
    # Same weights, same float32 math per example; only the reductions
    # (over a row's positions, over the batch) may be ordered differently,
    # a few ulps of values of size ~1. Measured on JAX: logits 4.8e-7,
    # loss 1.2e-7 (TensorFlow: 3.6e-7, 0: compiled vs eager).
    assert logits.shape == (20, CLASSES)
    np.testing.assert_allclose(logits, expected_logits, atol=5e-6)
    assert loss == pytest.approx(expected_loss, abs=5e-6)
    print(
        f"evaluate: {loss - expected_loss:.3g}, predict: "
        f"{np.max(np.abs(logits - expected_logits)):.3g}"
    )


def _weights_or_error(model):
    try:
        return model.get_weights()
    except TypeError as error:
        return error


def test_batch_not_divisible_by_device_count(encoder_run, encoder_copy):
    run = encoder_run
    x, y = run.x[:22], run.y[:22]
    # Built before entering the scope: clear_session() (in _built) also
    # clears the current distribution.
    fresh = _built(run.build, run.distribution)
    lost = _built(run.build, run.distribution)
    initial = fresh.get_weights()
    trained = encoder_copy.get_weights()
    with run.distribution.scope():
        if BACKEND != "jax":
            # Nothing is split on one device.
            logits = encoder_copy.predict(x, batch_size=8, verbose=0)
            assert logits.shape == (22, CLASSES)
            return
        # Keras puts each batch on the mesh as it comes (no padding, no
        # dropping): 6 rows cannot be split over 4 devices. jax's
        # IndivisibleError is a ValueError.
        message = "partitioned 4 times, but the dimension size is 6"
        # fit: its `finally` puts the weights back (here: untouched).
        with pytest.raises(ValueError, match=message):
            fresh.fit(x[:6], y[:6], batch_size=6, verbose=0)
        for a, b in zip(initial, fresh.get_weights()):
            np.testing.assert_array_equal(b, a)
        # predict takes the weights off the variables for its loop and
        # has no `finally`: after the error the model has none. After a
        # full batch (22 rows, batches of 8: the last has 6), the JAX
        # trainer's `jax_state_sync()` puts them back...
        with pytest.raises(ValueError, match=message):
            encoder_copy.predict(x, batch_size=8, verbose=0)
        error = _weights_or_error(encoder_copy)
        assert isinstance(error, TypeError)
        assert "'NoneType' object is not callable" in str(error)
        encoder_copy.jax_state_sync()
        for a, b in zip(trained, encoder_copy.get_weights()):
            np.testing.assert_array_equal(b, a)
        # ... but when the first batch fails, they are lost for good.
        with pytest.raises(ValueError, match=message):
            lost.predict(x[:6], batch_size=6, verbose=0)
        lost.jax_state_sync()
        assert isinstance(_weights_or_error(lost), TypeError)


def test_data_parallel_construction():
    if BACKEND == "torch":
        # No torch implementation of keras.distribution: anything that
        # asks the backend (listing devices, DataParallel() without
        # devices) fails on the missing backend module.
        message = "'NoneType' object has no attribute 'list_devices'"
        with pytest.raises(AttributeError, match=message):
            keras.distribution.list_devices()
        with pytest.raises(AttributeError, match=message):
            keras.distribution.DataParallel()
    else:
        assert keras.distribution.list_devices() == [
            f"cpu:{i}" for i in range(4)
        ]
        distribution = keras.distribution.DataParallel()
        assert distribution.device_mesh.devices.tolist() == [
            f"cpu:{i}" for i in range(4)
        ]
    # Given names, it is built on every backend (nothing checks them).
    distribution = keras.distribution.DataParallel(devices=["cpu:0", "cpu:1"])
    assert distribution.device_mesh.shape == (2,)
    assert distribution.batch_dim_name == "batch"
