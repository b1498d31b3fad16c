"""One mechanism runs kmodels' hooks before each compiled step
(`kmodels.backend.steps`): ordered hooks, on the batches of each
execution, one wrapper per model and kind, shared by the input contracts
and the growth of tables."""

import keras
import numpy as np
import pytest

from kmodels.backend import steps
from kmodels.contracts import enforce
from kmodels.growable import EmbeddingGrowth
from kmodels.growable import GrowableEmbedding

# Keras' torch trainer runs one batch per execution.
SPE = 1 if keras.backend.backend() == "torch" else 2
X = np.arange(16, dtype="float32").reshape(8, 2)
Y = np.ones((8, 1), "float32")


class Recorder(steps.StepHook):
    def __init__(self, name, order, log, refuse_at=None):
        self.name = name
        self.order = order
        self.log = log
        self.refuse_at = refuse_at

    def before_step(self, step):
        xs = [
            keras.ops.convert_to_numpy(
                keras.utils.unpack_x_y_sample_weight(batch)[0]
            )
            for batch in step.batches
        ]
        self.log.append((self.name, step.kind, step.training, xs))
        if self.refuse_at is not None and len(self.log) > self.refuse_at:
            raise ValueError(f"{self.name} refuses this step")


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(keras.optimizers.SGD(0.01), "mse", steps_per_execution=SPE)
    # Hooks wrap the step functions Keras has made (fit makes its own
    # before `on_train_begin`, where the growth hook is added).
    model.make_train_function()
    model.make_test_function()
    model.make_predict_function()
    return model


def test_hooks_run_in_order_on_the_batches_of_each_step():
    model = _model()
    log = []
    late, early = Recorder("late", 5, log), Recorder("early", 1, log)
    for kind in steps.KINDS:
        # Added late first: `order` decides, not the order of adding.
        steps.add_hook(model, kind, late)
        steps.add_hook(model, kind, early)
    assert steps.hooks(model, "train") == [early, late]
    model.fit(X, Y, batch_size=2, shuffle=False, epochs=1, verbose=0)
    # 4 batches, SPE per execution, each execution seen by both hooks in
    # order, on the same concrete batches.
    assert [(n, k, t) for n, k, t, _ in log] == [
        ("early", "train", True),
        ("late", "train", True),
    ] * (4 // SPE)
    assert [len(xs) for _, _, _, xs in log] == [SPE] * (8 // SPE)
    seen = [np.concatenate(xs) for name, _, _, xs in log if name == "early"]
    np.testing.assert_array_equal(np.concatenate(seen), X)
    log.clear()
    model.evaluate(X, Y, batch_size=8 // SPE, verbose=0)
    assert [(n, k, t) for n, k, t, _ in log] == [
        ("early", "test", False),
        ("late", "test", False),
    ]
    np.testing.assert_array_equal(np.concatenate(log[0][3]), X)
    log.clear()
    model.predict(X, batch_size=8 // SPE, verbose=0)
    assert [(n, k) for n, k, _, _ in log] == [
        ("early", "predict"),
        ("late", "predict"),
    ]
    np.testing.assert_array_equal(np.concatenate(log[0][3]), X)


def test_a_refusing_hook_stops_the_step_and_keeps_the_weights():
    model = _model()
    before = [w.copy() for w in model.get_weights()]
    log = []
    hook = Recorder("refuse", 0, log, refuse_at=0)
    steps.add_hook(model, "train", hook)
    with pytest.raises(ValueError, match="refuse refuses this step"):
        model.fit(X, Y, batch_size=2, verbose=0)
    # No step ran; on JAX the state is back in the variables.
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    steps.remove_hook(model, "train", hook)
    model.fit(X, Y, batch_size=2, verbose=0)
    assert not np.array_equal(model.get_weights()[0], before[0])


def test_the_last_hook_out_puts_the_keras_step_back():
    model = _model()
    original = model.train_function
    first, second = Recorder("a", 0, []), Recorder("b", 1, [])
    steps.add_hook(model, "train", first)
    steps.add_hook(model, "train", second)
    wrapped = model.train_function
    assert wrapped is not original
    assert steps.keras_step_function(model, "train") is original
    steps.remove_hook(model, "train", first)
    assert model.train_function is wrapped
    steps.remove_hook(model, "train", second)
    assert model.train_function is original
    assert steps.hooks(model, "train") == []


def test_contracts_and_growth_share_one_wrapper():
    keras.utils.set_random_seed(0)
    ids = keras.Input((3,), dtype="int32")
    table = GrowableEmbedding(4, initial_capacity=4, name="table")
    outputs = keras.layers.Dense(1)(keras.ops.sum(table(ids), axis=1))
    model = enforce(keras.Model(ids, outputs))
    model.compile(keras.optimizers.SGD(0.1), "mse")
    during = []

    class Watch(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            during.append(
                [type(h).__name__ for h in steps.hooks(model, "train")]
            )

    x = np.array([[0, 1, 2], [3, 9, 11]], "int32")
    model.fit(
        x,
        np.zeros((2, 1), "float32"),
        verbose=0,
        callbacks=[EmbeddingGrowth(), Watch()],
    )
    # The input checks first, then the growth; one hook of each.
    assert during == [["_ContractHook", "_GrowthHook"]]
    assert table.capacity >= 12
    assert [type(h).__name__ for h in steps.hooks(model, "train")] == [
        "_ContractHook"
    ]
    # A refused batch (a negative id) stops the step before any growth.
    capacity = table.capacity
    with pytest.raises(ValueError, match="table"):
        model.fit(
            np.array([[0, -1, 40]], "int32"),
            np.zeros((1, 1), "float32"),
            verbose=0,
            callbacks=[EmbeddingGrowth()],
        )
    assert table.capacity == capacity
