"""Pins what `kmodels.backend.keras_internals` reads from Keras' private
API, on the installed Keras: a release that changes one fails here, by
name. The versions it was checked against are pinned too."""

import importlib.metadata
import warnings

import keras
import keras_hub
import numpy as np
import pytest

from kmodels.backend import keras_internals

# Kept outside the layer: Keras would track a list of layers as sublayers.
_OUTERMOST = []


class _Probe(keras.layers.Layer):
    """Records the outermost layer of each call."""

    def call(self, x):
        _OUTERMOST.append(keras_internals.outermost_layer())
        return x


def test_outermost_layer_is_the_called_model():
    probe = _Probe()
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(probe(inputs)))
    _OUTERMOST.clear()
    model(np.ones((1, 2), "float32"))
    probe(np.ones((1, 2), "float32"))
    assert _OUTERMOST == [model, probe]
    assert keras_internals.outermost_layer() is None


def test_outermost_layer_inside_a_stateless_call():
    """`stateless_call` (JAX's predict step) opens no call context for the
    model: the layers inside still learn it; a layer's own stateless call
    (not a model's) runs inside no layer's call."""
    probe = _Probe()
    inputs = keras.Input((2,))
    model = keras.Model(inputs, probe(inputs))
    _OUTERMOST.clear()
    values = [v.value for v in model.non_trainable_variables]
    model.stateless_call([], values, np.ones((1, 2), "float32"))
    probe.stateless_call([], [], np.ones((1, 2), "float32"))
    assert _OUTERMOST == [model, None]


def test_functional_structure():
    a = keras.Input((2,), name="a")
    b = keras.Input((3,), name="b")
    dense = keras.layers.Dense(2)
    out = dense(a) + dense(keras.layers.Dense(2)(b))
    model = keras.Model({"a": a, "b": b}, out)
    assert keras_internals.inputs_struct(model) == {"a": a, "b": b}
    assert keras_internals.calls_in_graph(model, dense) == 2
    nodes = keras_internals.inbound_nodes(dense)
    assert [node.arguments.args[0] for node in nodes][0] is a
    assert set(map(id, keras_internals.sublayers(model))) >= {id(dense)}
    sequential = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    assert keras_internals.inputs_struct(keras.layers.Dense(1)) is None
    assert keras_internals.calls_in_graph(sequential.layers[0], dense) == 0


def _run_sampler(sampler):
    """Runs `sampler` through `run_sampler_loop` on a step that always
    favours id 3 and counts its calls in the cache: `(loop calls, results
    of sampler_loop_results)`."""
    calls = []

    def loop(cond, body, initial, maximum_iterations):
        calls.append(len(initial))
        return keras.ops.while_loop(
            cond, body, initial, maximum_iterations=maximum_iterations
        )

    def next(prompt, cache, index):
        ids = keras.ops.full((prompt.shape[0],), 3, "int32")
        return keras.ops.one_hot(ids, 5) * 4.0, None, cache + 1

    prompt = np.zeros((2, 5), "int32")
    prompt[:, 0] = 1
    final = keras_internals.run_sampler_loop(
        sampler,
        loop,
        next,
        keras.ops.convert_to_tensor(prompt),
        cache=keras.ops.zeros((2,), "int32"),
        index=1,
        mask=keras.ops.convert_to_tensor(prompt != 0),
    )
    return calls, keras_internals.sampler_loop_results(final)


def test_run_sampler_loop_returns_the_final_loop_variables():
    sampler = keras_hub.samplers.GreedySampler()
    calls, (prompt, cache, index, log_probs) = _run_sampler(sampler)
    # prompt, cache, index, mask: the caller's loop ran them, once.
    assert calls == [4]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(prompt), [[1, 3, 3, 3, 3]] * 2
    )
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(cache), [4, 4])
    assert int(keras.ops.convert_to_numpy(index)) == 5
    assert log_probs is None
    # A copy ran: the sampler keeps keras-hub's own loop.
    assert "run_loop" not in vars(sampler)

    beam = keras_hub.samplers.BeamSampler(num_beams=2, return_all_beams=True)
    calls, (prompt, cache, index, log_probs) = _run_sampler(beam)
    # The beams' log-probabilities come fifth, one per flattened beam.
    assert calls == [5]
    assert tuple(prompt.shape) == (4, 5) and tuple(log_probs.shape) == (4,)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(cache), [4] * 4)
    step = float(np.log(np.exp(4.0) / (np.exp(4.0) + 4.0)))
    np.testing.assert_allclose(
        np.max(keras.ops.convert_to_numpy(log_probs).reshape(2, 2), 1),
        [4 * step] * 2,
        rtol=1e-5,
    )
    assert "run_loop" not in vars(beam)


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_ask_to_proceed_with_overwrite(monkeypatch):
    answers = iter(["maybe", "n", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert keras_internals.ask_to_proceed_with_overwrite("a.keras") is False
    assert keras_internals.ask_to_proceed_with_overwrite("a.keras") is True


def test_backend_optimizer_module():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    module = model.get_compile_config()["optimizer"]["module"]
    # Only torch swaps in its own optimizer classes.
    on_torch = keras.backend.backend() == "torch"
    assert keras_internals.is_backend_optimizer_module(module) is on_torch
    assert not keras_internals.is_backend_optimizer_module("keras.optimizers")
    assert not keras_internals.is_backend_optimizer_module(None)


class _XLAWhenAuto(keras_internals.AutoJitCompileHook, keras.Model):
    def __init__(self, xla):
        super().__init__()
        self.xla = xla
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

    def _xla_when_auto(self):
        return self.xla


def test_auto_jit_compile_hook():
    keras_choice = keras.backend.backend() == "jax"
    for xla, expected in ((True, True), (False, keras_choice)):
        model = _XLAWhenAuto(xla)
        model.compile(optimizer="sgd", loss="mse")
        assert model.jit_compile is expected
    # A layer without XLA support keeps it off, asked or not.
    model = _XLAWhenAuto(True)
    model.dense.supports_jit = False
    model.compile(optimizer="sgd", loss="mse")
    assert model.jit_compile is False


class _KnownBatch(keras_internals.BuildWithoutData, keras.Model):
    def __init__(self):
        super().__init__(name="known_batch")
        self.dense = keras.layers.Dense(1)
        self.specs = 0

    def call(self, x):
        return self.dense(x)

    def _batch_spec(self):
        self.specs += 1
        return keras.KerasTensor((None, 3)), keras.KerasTensor((None, 1))


def test_build_without_data_reads_no_batch():
    # JAX and torch build the loss before the first step, from the spec
    # (once; without it they read batch 0 twice); TensorFlow (no strategy)
    # builds inside its first step and never asks.
    read = []

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            read.append(i)
            return np.full((2, 3), i, "float32"), np.zeros((2, 1), "float32")

    model = _KnownBatch()
    model.compile(optimizer="sgd", loss="mse")
    model.fit(Batches(), shuffle=False, verbose=0)
    if keras.backend.backend() == "tensorflow":
        # Its `tf.data` adapter reads two batches first for their signature.
        assert read == [0, 1, 0, 1, 2] and model.specs == 0
    else:
        assert read == [0, 1, 2] and model.specs == 1


def test_keras_mask_read_and_written():
    x = keras.ops.ones((2, 3))
    assert keras_internals.get_keras_mask(x) is None
    mask = np.array([[True, False, True]] * 2)
    keras_internals.set_keras_mask(x, keras.ops.convert_to_tensor(mask))
    np.testing.assert_array_equal(_np(keras_internals.get_keras_mask(x)), mask)
    keras_internals.set_keras_mask(x, None)
    assert keras_internals.get_keras_mask(x) is None
    embedding = keras.layers.Embedding(5, 2, mask_zero=True)
    out = embedding(np.array([[1, 0]]))
    np.testing.assert_array_equal(
        _np(keras_internals.get_keras_mask(out)), [[True, False]]
    )


def test_compute_output_spec_traces_a_function():
    spec = keras_internals.compute_output_spec(
        lambda x: keras.ops.concatenate([x, x], -1),
        keras.KerasTensor((2, 3), "float16"),
    )
    assert isinstance(spec, keras.KerasTensor)
    assert (tuple(spec.shape), spec.dtype) == ((2, 6), "float16")


def test_mean_loss_averages_per_example_values():
    loss = keras_internals.mean_loss(keras.losses.get("mse"))
    assert isinstance(loss, keras.losses.Loss)
    assert loss.name == "mean_squared_error"
    y_pred = np.array([[1.0, 1.0], [3.0, 3.0]])
    assert float(loss(np.zeros((2, 2)), y_pred)) == 5.0
    # Targets of rank 1 against predictions (batch, 1): ranks matched as
    # `compile` does (broadcast, they would give 3.0).
    assert float(loss(np.array([0.0, 2.0]), np.array([[1.0], [3.0]]))) == 1.0


def test_learning_rate_or_schedule():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 1, 0.5)
    sgd = keras.optimizers.SGD(schedule)
    assert keras_internals.learning_rate_or_schedule(sgd) is schedule
    adam = keras.optimizers.Adam(0.5)
    rate = keras_internals.learning_rate_or_schedule(adam)
    assert isinstance(rate, keras.Variable)
    assert float(keras.ops.convert_to_numpy(rate.value)) == 0.5


def test_variable_storage_replaced_with_a_new_shape():
    variable = keras.Variable(np.zeros((2, 3), "float32"))
    storage = keras_internals.variable_storage(variable)
    # The backend's own object, the one `value` reads.
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(storage), np.zeros((2, 3))
    )
    grown = keras.ops.convert_to_tensor(np.ones((4, 3), "float32"))
    keras_internals.set_variable_storage(variable, grown)
    keras_internals.set_variable_shape(variable, (4, 3))
    assert variable.shape == (4, 3)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(variable.value), np.ones((4, 3))
    )


def test_loss_dtype_policy_and_inputs_as_given():
    loss = keras.losses.MeanSquaredError(dtype="mixed_float16")
    assert keras_internals.loss_dtype_policy(loss).name == "mixed_float16"
    assert loss.dtype == "float16"
    received = []

    class Pipeline(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            keras_internals.take_inputs_as_given(self)

        def call(self, x):
            received.append(x)
            return keras.ops.zeros((1,))

    Pipeline()(["a", "b"])
    # Not converted to a tensor: the list arrives as it was given.
    assert received == [["a", "b"]]


def test_step_functions_and_methods_on_a_model_instance():
    # Keras calls the step function held by the instance, makes it again
    # once dropped, and looks the entry points up on the instance first.
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((4, 2), "float32"), np.zeros((4, 1), "float32")
    model.predict(x, verbose=0)
    made = model.predict_function
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        return made(*args, **kwargs)

    keras_internals.set_step_function(model, "predict", wrapped)
    model.predict(x, batch_size=2, verbose=0)
    assert len(calls) == 2 and model.predict_function is wrapped
    keras_internals.drop_step_functions(model, ("predict",))
    model.predict(x, batch_size=2, verbose=0)
    assert len(calls) == 2
    assert model.predict_function not in (None, wrapped)
    seen = []
    fit = type(model).fit

    def checked_fit(*args, **kwargs):
        seen.append(args[0].shape)
        return fit(model, *args, **kwargs)

    keras_internals.override_methods(model, {"fit": checked_fit})
    model.fit(x, y, verbose=0)
    assert seen == [(4, 2)]


@pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="the JAX trainer's internals (kmodels/backend/jax/"
    "keras_internals.py) exist on JAX only; the other backends keep the "
    "state in the variables",
)
def test_jax_state_written_back_and_taken():
    from kmodels.backend.jax import keras_internals as jax_internals

    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile("sgd", "mse")
    model.fit(np.ones((2, 2)), np.ones((2, 1)), verbose=0)
    state = jax_internals.take_jax_state(model, "train")
    assert [len(part) for part in state] == [
        len(model.trainable_variables),
        len(model.non_trainable_variables),
        len(model.optimizer.variables),
        len(model.metrics_variables),
    ]
    kernel = np.asarray(state[0][0])
    changed = (state[0][0] + 1.0,) + tuple(state[0][1:])
    jax_internals.set_jax_state(model, "train", (list(changed),) + state[1:])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.trainable_variables[0].value),
        kernel + 1.0,
    )
    assert "current_path" in dir(jax_internals)
    with keras.name_scope("outer"):
        assert jax_internals.current_path() == "outer"
    # The running state cut to the variables' rows before it is written
    # back (a table padded in the step: kmodels/backend/jax/growth.py):
    # a kernel holding one row too many is cut by `cut`, the rest kept.
    state = jax_internals.take_jax_state(model, "train")
    kernel = np.asarray(state[0][0])
    padded = keras.ops.concatenate([state[0][0], keras.ops.ones((1, 1))])
    cuts = []
    original = type(model).jax_state_sync

    def sync():
        jax_internals.trim_jax_state(
            model, lambda value, rows: cuts.append(rows) or value[:rows]
        )
        original(model)

    model.__dict__["jax_state_sync"] = sync
    try:
        jax_internals.set_jax_state(
            model, "train", ([padded, *state[0][1:]],) + state[1:]
        )
    finally:
        del model.__dict__["jax_state_sync"]
    assert cuts == [2]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model.trainable_variables[0].value), kernel
    )
    # The value a stateless scope gives a variable; `None` outside one.
    variable = model.trainable_variables[1]
    assert jax_internals.stateless_value(variable) is None
    value = keras.ops.ones(variable.shape)
    with keras.StatelessScope(state_mapping=[(variable, value)]):
        assert jax_internals.stateless_value(variable) is value


# ------------------------------------------------------------- version pin
def test_checked_versions_are_the_installed_ones():
    installed = keras_internals.installed_versions()
    assert installed == {
        "keras": keras.__version__,
        "keras-hub": keras_hub.__version__,
    }
    running = {
        name: ".".join(version.split(".")[:2])
        for name, version in installed.items()
    }
    assert running == keras_internals.CHECKED_VERSIONS, (
        f"kmodels.backend.keras_internals was checked against "
        f"{keras_internals.CHECKED_VERSIONS}; installed: {installed}. "
        "Run this file on the new versions, fix what fails, then update "
        "CHECKED_VERSIONS."
    )


def _check_versions(monkeypatch, keras_version, hub_version):
    """The warnings of a first `check_versions()` call, then of a second,
    with Keras and keras-hub reporting the versions given."""
    metadata_version = importlib.metadata.version

    def version(name):
        if name == "keras-hub":
            return hub_version
        return metadata_version(name)

    monkeypatch.setattr(keras, "version", lambda: keras_version)
    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(keras_internals, "_warned", False)
    caught = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            keras_internals.check_versions()
        caught.append([(w.category, str(w.message)) for w in record])
    return caught


def test_a_newer_keras_warns_once(monkeypatch):
    first, second = _check_versions(monkeypatch, "3.16.0", "0.32.0")
    assert second == []
    [(category, message)] = first
    assert category is UserWarning
    assert message.startswith(
        "kmodels' Keras internals were checked against keras 3.15.x and "
        "keras-hub 0.32.x; this process runs the newer keras 3.16.0."
    )
    named = message.split("may break: ")[1].split(". ")[0].split(", ")
    assert named == keras_internals.pinned_functions()
    for name in ("outermost_layer", "AutoJitCompileHook", "mean_loss"):
        assert name in named
    assert "kmodels.backend.<backend>.keras_internals" in message
    assert "report it on the kmodels issue tracker" in message


def test_a_newer_keras_hub_warns_naming_it(monkeypatch):
    first, second = _check_versions(monkeypatch, "3.15.1", "0.33.0.dev1")
    assert second == []
    [(category, message)] = first
    assert category is UserWarning
    assert "this process runs the newer keras-hub 0.33.0.dev1." in message
    assert "CHECKED_VERSIONS in kmodels/backend/keras_internals.py" in message


def test_the_checked_versions_are_silent(monkeypatch):
    for versions in (
        ("3.15.1", "0.32.0"),
        ("3.15.9", "0.32.7"),
        ("3.14.0", "0.31.0"),
    ):
        assert _check_versions(monkeypatch, *versions) == [[], []]
