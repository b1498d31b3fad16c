"""The sparse optimizers of GrowableEmbedding on every backend: SGD with
momentum (and Nesterov), Adagrad and Adam, with learning-rate schedules,
match the NumPy oracle step by step through `model.fit` while the table
grows; `optimizer=None` follows the model's optimizer; saving keeps the
slots; bad settings raise clear errors."""

import keras
import numpy as np
import pytest

from backends_tests.refusals import raises_exactly
from kmodels.callbacks import EmbeddingGrowth
from kmodels.growable import SparseAdagrad
from kmodels.growable import SparseAdam
from kmodels.growable import SparseSGD
from kmodels.layers import GrowableEmbedding
from kmodels.testing import oracle
from kmodels.testing.oracle.sparse_optimizer import exponential_decay
from kmodels.testing.table_states import TableStates

# float32 against float64 over three steps of size <= 0.1 on values of
# order 1: rounding is near 1e-7.
ATOL = 1e-6
DIM = 2
# Three batches of one example; ids up to 7 arrive in the second batch, so a
# table of 4 rows grows to 8 mid-training. Repeated ids sum their gradients.
X = np.array([[[0, 1, 1, 2]], [[2, 5, 7, 7]], [[1, 7, 3, 0]]], "int32")
INIT = keras.initializers.RandomUniform(-1.0, 1.0)


def _decay(lr):
    return keras.optimizers.schedules.ExponentialDecay(lr, 1, 0.5)


# (table optimizer, oracle keyword arguments, oracle slots at zero rows).
RULES = {
    "sgd_momentum": (
        ("sgd", {"learning_rate": 0.1, "momentum": 0.9}),
        dict(kind="sgd", learning_rate=0.1, momentum=0.9),
        (0.0,),
    ),
    "sgd_nesterov_schedule": (
        (
            "sgd",
            {"learning_rate": _decay(0.1), "momentum": 0.5, "nesterov": True},
        ),
        dict(
            kind="sgd",
            learning_rate=exponential_decay(0.1, 1, 0.5),
            momentum=0.5,
            nesterov=True,
        ),
        (0.0,),
    ),
    "adagrad": (
        ("adagrad", {"learning_rate": 0.1, "initial_accumulator_value": 0.2}),
        dict(kind="adagrad", learning_rate=0.1),
        (0.2,),
    ),
    "adam_schedule": (
        ("adam", {"learning_rate": _decay(0.01)}),
        dict(kind="adam", learning_rate=exponential_decay(0.01, 1, 0.5)),
        (0.0, 0.0),
    ),
}


def _numpy(variable):
    return keras.ops.convert_to_numpy(variable.value).astype(np.float64)


def _fit(layer, optimizer="sgd", x=X):
    ids = keras.Input(shape=(x.shape[-1],), dtype="int32")
    model = keras.Model(ids, layer(ids))
    model.compile(optimizer=optimizer, loss="mse")
    return model, _refit(model, layer, x)


def _refit(model, layer, x=X):
    record = TableStates(layer)
    model.fit(
        x.reshape(-1, x.shape[-1]),
        np.zeros((len(x), x.shape[-1], DIM)),
        batch_size=1,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth(), record],
    )
    return record.states


def _oracle_run(table, slots, x, first_step=0, **kwargs):
    """Oracle states after each batch; MSE towards zeros over `n` ids of
    `DIM` columns: dLoss/drow = 2 row / (n DIM) per occurrence."""
    states = []
    for k, ids in enumerate(x):
        grads = 2.0 * table[ids] / (ids.size * DIM)
        table, slots = oracle.sparse_optimizer_step(
            table, slots, first_step + k, ids, grads, **kwargs
        )
        states.append([table, *slots])
    return states


def _presized(capacity, seed):
    layer = GrowableEmbedding(
        DIM, initial_capacity=capacity, embeddings_initializer=INIT, seed=seed
    )
    layer.build()
    return _numpy(layer.embeddings)


def _assert_states(states, expected, atol=ATOL):
    assert len(states) == len(expected)
    for step, (got, want) in enumerate(zip(states, expected)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            # Before the growth the table has fewer rows than the oracle's
            # pre-sized one: compare those it has.
            np.testing.assert_allclose(
                g, w[: len(g)], atol=atol, rtol=0, err_msg=f"step {step}"
            )


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rule_matches_oracle_each_step_while_growing(rule):
    """Growth is invisible for every rule: the table grows 4 -> 8 rows in
    the second step and each step equals the oracle run on a table
    pre-sized to 8 rows (new rows' slots start at zero, Adagrad's
    accumulator at its initial value)."""
    optimizer, kwargs, initial = RULES[rule]
    layer = GrowableEmbedding(
        DIM,
        initial_capacity=4,
        optimizer=optimizer,
        embeddings_initializer=INIT,
        seed=3,
    )
    _, states = _fit(layer)
    assert layer.capacity == 8 and layer.growths == 1
    table = _presized(8, seed=3)
    slots = [np.full_like(table, value) for value in initial]
    expected = _oracle_run(table, slots, X, **kwargs)
    _assert_states(states, expected)
    if callable(kwargs["learning_rate"]):
        # The schedule matters: at the schedule's first rate throughout,
        # the oracle ends far from the run.
        constant = dict(kwargs, learning_rate=kwargs["learning_rate"](0))
        far = _oracle_run(table, slots, X, **constant)[-1][0]
        assert np.abs(far - states[-1][0]).max() > 100 * ATOL


def test_none_follows_the_model_optimizer_and_its_changes():
    """`optimizer=None` reads the model's optimizer when fit starts: kind,
    hyperparameters and schedule. Recompiled with another kind, the next
    fit retraces and the new rule starts fresh (slots and step)."""
    layer = GrowableEmbedding(
        DIM,
        initial_capacity=4,
        optimizer=None,
        embeddings_initializer=INIT,
        seed=5,
    )
    schedule = _decay(0.1)
    adagrad = keras.optimizers.Adagrad(
        schedule, initial_accumulator_value=0.3, epsilon=1e-6
    )
    model, states = _fit(layer, adagrad)
    rule = layer.table_optimizer
    assert rule.kind == "adagrad" and rule.learning_rate is schedule
    assert (rule.initial_accumulator_value, rule.epsilon) == (0.3, 1e-6)
    table = _presized(8, seed=5)
    expected = _oracle_run(
        table,
        [np.full_like(table, 0.3)],
        X,
        kind="adagrad",
        learning_rate=exponential_decay(0.1, 1, 0.5),
        epsilon=1e-6,
    )
    _assert_states(states, expected)
    # Only the followed rule's slot holds rows.
    rows = {v.name: v.shape[0] for v in layer.slot_variables}
    assert rows == {"momentum": 0, "velocity": 0, "accumulator": 8}

    model.compile(
        optimizer=keras.optimizers.SGD(0.05, momentum=0.8, nesterov=True),
        loss="mse",
    )
    states = _refit(model, layer, X[:2])
    # Keras keeps a constant rate in a float32 variable: read as it is.
    assert layer.table_optimizer == SparseSGD(
        learning_rate=float(np.float32(0.05)), momentum=0.8, nesterov=True
    )
    rows = {v.name: v.shape[0] for v in layer.slot_variables}
    assert rows == {"momentum": 8, "velocity": 0, "accumulator": 0}
    expected = _oracle_run(
        expected[-1][0],
        [np.zeros_like(table)],
        X[:2],
        kind="sgd",
        learning_rate=0.05,
        momentum=0.8,
        nesterov=True,
    )
    _assert_states(states, expected)
    assert float(_numpy(layer.step)) == 2.0


@pytest.mark.parametrize("optimizer", ["adagrad", None])
def test_save_load_keeps_slots(optimizer, tmp_path):
    """Nothing lost: table, slots and step survive a .keras round trip,
    and training on from the loaded model equals training on."""
    layer = GrowableEmbedding(
        DIM,
        initial_capacity=4,
        optimizer=optimizer,
        embeddings_initializer=INIT,
        seed=7,
    )
    model, _ = _fit(layer, keras.optimizers.SGD(0.1, momentum=0.9))
    path = str(tmp_path / "table.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    twin = loaded.layers[-1]
    assert isinstance(twin, GrowableEmbedding) and twin.capacity == 8
    for a, b in zip(
        [layer.embeddings, layer.step, *layer.slot_variables],
        [twin.embeddings, twin.step, *twin.slot_variables],
    ):
        np.testing.assert_array_equal(_numpy(b), _numpy(a))
    live = [v for v in layer.slot_variables if v.shape[0]]
    assert len(live) == 1 and live[0].shape == (8, DIM)
    after = _refit(model, layer, X[1:])
    after_loaded = _refit(loaded, twin, X[1:])
    _assert_states(after_loaded, after, atol=0)


@pytest.mark.parametrize(
    "model_optimizer", ["ftrl", "lion", "rmsprop", "adamw"]
)
def test_unsupported_model_optimizer_is_refused(model_optimizer):
    layer = GrowableEmbedding(DIM, initial_capacity=8, optimizer=None)
    ids = keras.Input(shape=(4,), dtype="int32")
    model = keras.Model(ids, layer(ids))
    model.compile(optimizer=model_optimizer, loss="mse")
    name = type(model.optimizer).__name__
    message = (
        f"GrowableEmbedding '{layer.name}' has optimizer=None: it follows the "
        "model's optimizer, which must be a keras.optimizers.SGD, Adagrad or "
        "Adam (the row-sparse rules GrowableEmbedding has); got "
        f"{name}. Give the table its own optimizer, e.g. optimizer='adagrad'."
    )
    with raises_exactly(ValueError, message):
        model.fit(
            X[0],
            np.zeros((1, 4, DIM)),
            verbose=0,
            callbacks=[EmbeddingGrowth()],
        )


def test_training_before_following_is_refused():
    layer = GrowableEmbedding(DIM, initial_capacity=8, optimizer=None)
    with pytest.raises(ValueError, match="has optimizer=None .* has not read"):
        layer(X[0], training=True)
    # Inference needs no rule.
    assert tuple(layer(X[0]).shape) == (1, 4, DIM)


@pytest.mark.parametrize(
    "optimizer, message",
    [
        (
            ("sgd", {"momentum": 1.5}),
            "GrowableEmbedding: `optimizer.momentum` must be a finite number "
            ">= 0 and <= 1; got 1.5 (float).",
        ),
        (
            ("sgd", {"nesterov": 1}),
            "GrowableEmbedding: `optimizer.nesterov` must be True or False; "
            "got 1 (int).",
        ),
        (
            ("adagrad", {"initial_accumulator_value": -0.1}),
            "GrowableEmbedding: `optimizer.initial_accumulator_value` must be "
            "a finite number >= 0; got -0.1 (float).",
        ),
        (
            ("adagrad", {"beta_1": 0.9}),
            "GrowableEmbedding: `optimizer` 'adagrad' takes hyperparameters "
            "['epsilon', 'initial_accumulator_value', 'learning_rate']; got "
            "unknown ['beta_1'].",
        ),
        (
            ("adam", {"learning_rate": "fast"}),
            "GrowableEmbedding: `optimizer.learning_rate` must be a finite "
            "number > 0; got 'fast' (str).",
        ),
        (
            keras.optimizers.Ftrl(),
            "GrowableEmbedding's table optimizer must be a "
            "keras.optimizers.SGD, Adagrad or Adam (the row-sparse rules "
            "GrowableEmbedding has); got Ftrl. Give the table its own "
            "optimizer, e.g. optimizer='adagrad'.",
        ),
        (
            keras.optimizers.SGD(clipnorm=1.0),
            "GrowableEmbedding's table optimizer must be a "
            "keras.optimizers.SGD, Adagrad or Adam without clipnorm: "
            "GrowableEmbedding's sparse sgd does not apply it; got "
            "clipnorm=1.0.",
        ),
        (
            keras.optimizers.Adam(amsgrad=True),
            "GrowableEmbedding's table optimizer must be a "
            "keras.optimizers.SGD, Adagrad or Adam without amsgrad: "
            "GrowableEmbedding's sparse adam does not apply it; got "
            "amsgrad=True.",
        ),
    ],
)
def test_bad_optimizer_settings_are_refused(optimizer, message):
    with pytest.raises(ValueError) as caught:
        GrowableEmbedding(DIM, optimizer=optimizer)
    assert str(caught.value) == message


def test_keras_optimizer_and_schedule_config_round_trip():
    schedule = _decay(0.1)
    layer = GrowableEmbedding(
        DIM, optimizer=keras.optimizers.SGD(schedule, momentum=0.5)
    )
    rule = layer.optimizer
    assert rule.kind == "sgd" and rule.learning_rate is schedule
    assert (rule.momentum, rule.nesterov) == (0.5, False)
    config = layer.get_config()
    again = GrowableEmbedding.from_config(config)
    assert again.get_config() == config
    rate = again.optimizer.learning_rate
    assert isinstance(rate, keras.optimizers.schedules.ExponentialDecay)
    assert (rate.initial_learning_rate, rate.decay_rate) == (0.1, 0.5)
    follow = GrowableEmbedding(DIM, optimizer=None)
    assert follow.get_config()["optimizer"] is None
    assert follow.table_optimizer is None


def test_sparse_optimizer_objects_and_their_config():
    """A `SparseOptimizer` is taken as is; a pair, a config or a Keras
    optimizer gives an equal one; the layer's config keeps the form it
    had before the classes ({"kind": ..., hyperparameters})."""
    schedule = _decay(0.1)
    rule = SparseAdagrad(schedule, initial_accumulator_value=0.3)
    layer = GrowableEmbedding(DIM, optimizer=rule)
    assert layer.optimizer is rule and layer.table_optimizer is rule
    pair = ("adagrad", {"learning_rate": schedule, "epsilon": 1e-7})
    assert GrowableEmbedding(DIM, optimizer=pair).optimizer != rule
    pair[1]["initial_accumulator_value"] = 0.3
    assert GrowableEmbedding(DIM, optimizer=pair).optimizer == rule
    config = layer.get_config()["optimizer"]
    assert config == {
        "kind": "adagrad",
        "learning_rate": keras.optimizers.schedules.serialize(schedule),
        "initial_accumulator_value": 0.3,
        "epsilon": 1e-7,
    }
    assert list(config) == [
        "kind",
        "learning_rate",
        "initial_accumulator_value",
        "epsilon",
    ]
    again = GrowableEmbedding.from_config(layer.get_config()).optimizer
    assert isinstance(again, SparseAdagrad)
    assert again.get_config() == rule.get_config()
    assert rule.slot_names == ("accumulator",)
    assert rule.slot_initial_value("accumulator") == 0.3
    assert SparseSGD().slot_names == ()
    assert SparseSGD(momentum=0.5).slot_names == ("momentum",)
    assert SparseAdam().slot_names == ("momentum", "velocity")
    keras_adam = keras.optimizers.Adam(0.5, beta_1=0.8, epsilon=1e-6)
    assert GrowableEmbedding(DIM, optimizer=keras_adam).optimizer == (
        SparseAdam(float(np.float32(0.5)), beta_1=0.8, epsilon=1e-6)
    )


def test_rows_grown_before_following_get_the_rule_initial_value():
    """A loaded `optimizer=None` table does not know its rule until fit
    starts: rows grown before then get Adagrad's initial accumulator when
    it is read, and the saved rows keep their values."""
    layer = GrowableEmbedding(DIM, initial_capacity=4, optimizer=None)
    rule = keras.optimizers.Adagrad(initial_accumulator_value=0.3)
    assert layer.follow_optimizer(rule) is True
    assert layer.follow_optimizer(rule) is False  # same rule: kept
    store = {}
    layer.save_own_variables(store)
    twin = GrowableEmbedding.from_config(layer.get_config())
    twin.load_own_variables(store)
    assert twin.table_optimizer is None
    twin.grow_to(8)
    rows = {v.name: v.shape[0] for v in twin.slot_variables}
    assert rows == {"momentum": 0, "velocity": 0, "accumulator": 8}
    twin.follow_optimizer(
        keras.optimizers.Adagrad(initial_accumulator_value=0.5)
    )
    accumulator = _numpy(twin.trained_slots[0])
    np.testing.assert_array_equal(
        accumulator[:4], np.full((4, DIM), np.float32(0.3))
    )
    np.testing.assert_array_equal(
        accumulator[4:], np.full((4, DIM), np.float32(0.5))
    )
