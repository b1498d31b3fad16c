"""`GradientFlowCheck(every_n_steps=N)` and `GradientMonitor` inside
`model.fit`: a branch cut at step S is caught within `patience` checks with
the same flag on every backend; recorded statistics against NumPy; the
TensorBoard event files; the plot."""

import glob
import os
import struct
import warnings

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from kmodels.callbacks import GradientFlowCheck
from kmodels.diagnostics import GradientFlowWarning
from kmodels.diagnostics import GradientMonitor
from kmodels.diagnostics import plot_gradient_history
from kmodels.diagnostics.gradient_flow import POSITIONS_ONLY_CAUSE

BACKEND = keras.backend.backend()
# The gate closes before step CUT + 1; checks every N steps; flagged at the
# PATIENCE-th consecutive check without a gradient.
CUT, N, PATIENCE, STEPS = 20, 5, 2, 40


class Gate(keras.layers.Layer):
    """Multiplies its input by a non-trainable scalar (1 until closed)."""

    def build(self, input_shape):
        self.gate = self.add_weight(
            shape=(), initializer="ones", trainable=False, name="gate"
        )

    def call(self, x):
        return x * self.gate


class CloseGate(keras.callbacks.Callback):
    """Sets the gate to 0 before train step `at + 1`."""

    def __init__(self, at):
        super().__init__()
        self.at = at
        self.offset = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.offset = int(
            keras.ops.convert_to_numpy(self.model.optimizer.iterations)
        )

    def on_train_batch_begin(self, batch, logs=None):
        if self.offset + batch == self.at:
            # `self.model` puts JAX's state back into the variables first.
            self.model.get_layer("gate").gate.assign(0.0)


def gated_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    branch = Gate(name="gate")(keras.layers.Dense(2, name="branch")(inputs))
    main = keras.layers.Dense(2, name="main")(inputs)
    joined = keras.layers.Concatenate(name="join")([branch, main])
    model = keras.Model(inputs, keras.layers.Dense(1, name="head")(joined))
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype("float32")
    y = rng.normal(size=(32, 1)).astype("float32")
    return x, y


@pytest.fixture(scope="module")
def gated_run(tmp_path_factory):
    """40 steps (batch 4, 5 epochs), the gate closed after step 20."""
    log_dir = str(tmp_path_factory.mktemp("gradient_logs"))
    model = gated_model()
    x, y = data()
    check = GradientFlowCheck(
        (x[:8], y[:8]), every_n_steps=N, patience=PATIENCE, log_dir=log_dir
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(
            x,
            y,
            batch_size=4,
            epochs=5,
            verbose=0,
            callbacks=[check, CloseGate(CUT)],
        )
    flow = [w for w in caught if issubclass(w.category, GradientFlowWarning)]
    return model, check, flow, log_dir


def test_checks_every_n_steps_from_the_start(gated_run):
    _, check, _, _ = gated_run
    assert list(check.history) == list(range(0, STEPS + 1, N))
    paths = {v.path for v in gated_run[0].trainable_variables}
    for records in check.history.values():
        assert set(records) == paths


def test_cut_branch_is_flagged_within_patience_checks(gated_run):
    _, check, warned, _ = gated_run
    statuses = {
        step: records["branch/kernel"].status
        for step, records in check.history.items()
    }
    # A multiplication by 0 gives exact zeros on every backend (not None).
    assert statuses == {
        s: "ok" if s <= CUT else "zero" for s in range(0, STEPS + 1, N)
    }
    assert [(f.path, f.step, f.since, f.kind) for f in check.flags] == [
        ("branch/kernel", CUT + PATIENCE * N, CUT + N, "dead"),
        ("branch/bias", CUT + PATIENCE * N, CUT + N, "dead"),
    ]
    for flag in check.flags:
        assert flag.cause == (
            f"its gradient was non-zero at step {CUT} and exactly 0 since "
            f"step {CUT + N}: the path from layer 'branch' to the loss was "
            "cut during training (a gate or scale that reached 0, ReLUs "
            "that all died, a layer downstream whose output became "
            "constant)"
        )
    # One warning, at the check that raised both flags.
    assert len(warned) == 1
    message = str(warned[0].message)
    assert "step 30: 'branch/kernel' has had no gradient since step 25" in (
        message
    )
    assert "'branch/bias'" in message


def test_tensorboard_event_files_hold_the_checks(gated_run):
    model, check, _, log_dir = gated_run
    files = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    assert len(files) == 1
    scalars, histograms = {}, {}
    for event in tf.compat.v1.train.summary_iterator(files[0]):
        for value in event.summary.value:
            plugin = value.metadata.plugin_data.plugin_name
            array = tf.make_ndarray(value.tensor)
            target = scalars if plugin == "scalars" else histograms
            target.setdefault(value.tag, {})[event.step] = array
    paths = [v.path for v in model.trainable_variables]
    assert set(scalars) == {
        f"{kind}/{p}"
        for p in paths
        for kind in (
            "gradient_norm",
            "gradient_zero_fraction",
            "gradient_nonfinite_fraction",
        )
    }
    assert set(histograms) == {f"gradient/{p}" for p in paths}
    steps = list(range(0, STEPS + 1, N))
    norms = scalars["gradient_norm/branch/kernel"]
    assert sorted(norms) == steps
    for step in steps:
        # Written as float32: the float64 record rounded once.
        expected = np.float32(check.history[step]["branch/kernel"].norm)
        assert norms[step] == expected
        zeros = scalars["gradient_zero_fraction/branch/kernel"][step]
        assert zeros == (0.0 if step <= CUT else 1.0)
    # A histogram's counts add up to the variable's size (3 x 2 kernel).
    buckets = histograms["gradient/branch/kernel"][STEPS]
    assert buckets.shape[1] == 3 and buckets[:, 2].sum() == 6


def test_plot_writes_a_png_of_the_requested_size(gated_run, tmp_path):
    _, check, _, _ = gated_run
    path = str(tmp_path / "gradients.png")
    assert check.plot(path, title="gate closed at step 20", size=(320, 200))
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (320, 200)
    # Two runs side by side, one file.
    both = str(tmp_path / "both.png")
    plot_gradient_history(
        [check.monitor, check.monitor], both, ["a", "b"], size=(480, 160)
    )
    with open(both, "rb") as f:
        assert struct.unpack(">II", f.read(24)[16:24]) == (480, 160)


def test_recorded_statistics_match_numpy():
    """MSE of one Dense layer: the gradient in closed form, float64. The
    input's last column is 0, so that row of the kernel's gradient is
    exactly 0: a zero fraction of 2/6."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 3)).astype("float32")
    x[:, 2] = 0.0
    y = rng.normal(size=(8, 2)).astype("float32")
    monitor = GradientMonitor(model, x, y, loss=keras.losses.MeanSquaredError())
    monitor.check(0)
    kernel, bias = (w.astype("float64") for w in model.get_weights())
    x64, y64 = x.astype("float64"), y.astype("float64")
    residual = 2 * (x64 @ kernel + bias - y64) / y64.size
    expected = {"kernel": x64.T @ residual, "bias": residual.sum(axis=0)}
    records = monitor.history[0]
    for name, grad in expected.items():
        record = records[f"dense/{name}"]
        # float32 forward and backward against float64: 1e-5 relative.
        np.testing.assert_allclose(record.norm, np.linalg.norm(grad), rtol=1e-5)
        assert record.nonfinite_fraction == 0.0
        assert record.status == "ok"
    assert records["dense/kernel"].zero_fraction == 2 / 6
    assert records["dense/bias"].zero_fraction == 0.0
    np.testing.assert_allclose(
        monitor.losses[0], np.mean((x64 @ kernel + bias - y64) ** 2), rtol=1e-5
    )


def test_nonfinite_and_frozen_variables():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))
    x = np.ones((2, 3), "float32")

    def sqrt_loss(y_true, y_pred):
        # sqrt of numbers below 0: a NaN loss and NaN gradients.
        return keras.ops.mean(keras.ops.sqrt(y_pred - 100.0))

    monitor = GradientMonitor(model, x, x[:, :2], loss=sqrt_loss, patience=1)
    with pytest.warns(GradientFlowWarning, match="NaN or infinite"):
        flags = monitor.check(0)
    assert [(f.path, f.kind) for f in flags] == [
        ("dense/kernel", "nonfinite"),
        ("dense/bias", "nonfinite"),
    ]
    assert flags[0].cause.startswith("the loss is nan on this batch")
    assert monitor.history[0]["dense/kernel"].nonfinite_fraction == 1.0
    # Frozen: recorded as such, never flagged.
    model.get_layer("dense").trainable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientFlowWarning)
        assert monitor.check(1) == []
    assert {r.status for r in monitor.history[1].values()} == {"frozen"}


def test_seed_003_wiring_is_flagged_with_its_cause():
    """Seed 003's wiring (a token embedding fed to keras-hub's
    PositionEmbedding, whose output alone goes on) without the encoder."""
    inputs = keras.Input((4,), dtype="int32")
    tokens = keras.layers.Embedding(6, 4, name="embedding")(inputs)
    positions = keras_hub.layers.PositionEmbedding(
        4, name="position_embedding"
    )(tokens)
    logits = keras.layers.Dense(2, name="logits")(
        keras.layers.Flatten()(positions)
    )
    model = keras.Model(inputs, logits)
    x = np.array([[1, 2, 3, 4], [4, 3, 2, 1]], "int32")
    y = np.array([0, 1], "int32")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    monitor = GradientMonitor(model, x, y, loss=loss, patience=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientFlowWarning)
        assert monitor.check(0) == []
    with pytest.warns(GradientFlowWarning, match="token embedding output"):
        (flag,) = monitor.check(100)
    assert (flag.path, flag.kind, flag.since, flag.step) == (
        "embedding/embeddings",
        "disconnected",
        0,
        100,
    )
    assert flag.cause.startswith(POSITIONS_ONLY_CAUSE)
    # TensorFlow and torch return no gradient, JAX zeros: the same flag.
    status = monitor.history[0]["embedding/embeddings"].status
    assert status == ("zero" if BACKEND == "jax" else "missing")
    assert monitor.history[0]["embedding/embeddings"].zero_fraction == 1.0


def test_fit_ends_in_the_same_state_with_and_without_the_monitor():
    x, y = data()
    ends = []
    for callbacks in ([], [GradientFlowCheck((x[:8], y[:8]), every_n_steps=3)]):
        model = gated_model()
        model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=callbacks)
        ends.append([keras.ops.convert_to_numpy(v) for v in model.variables])
    for without, with_ in zip(*ends):
        np.testing.assert_array_equal(with_, without)


def test_arguments_are_checked():
    batch = (np.zeros((2, 3)), np.zeros((2, 1)))
    with pytest.raises(
        ValueError, match="`every_n_steps` must be an integer >= 1"
    ):
        GradientFlowCheck(batch, every_n_steps=0)
    with pytest.raises(ValueError, match="`patience` must be an integer >= 1"):
        GradientFlowCheck(batch, every_n_steps=5, patience=0)
    with pytest.raises(ValueError, match="pass `every_n_steps` with it"):
        GradientFlowCheck(batch, log_dir="logs")
