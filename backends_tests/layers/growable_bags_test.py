"""Bags of ids and shared tables of GrowableEmbedding on every backend:
`combiner="sum" | "mean" | "sqrtn"` with optional per-id weights, padding
(id 0 with `mask_zero=True`) ignored, one table shared by several features
in one call (gradients summed before one sparse update), all against the
NumPy oracle step by step through `model.fit` while the table grows; the
config and `.keras` files keep the combiner; bad inputs raise clear
errors."""

import re

import keras
import numpy as np
import pytest

import kmodels.contracts
from backends_tests.refusals import raises_exactly
from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.testing.oracle.embedding_bag import embedding_bag
from kmodels.testing.oracle.embedding_bag import embedding_bag_row_grads
from kmodels.testing.oracle.embedding_bag import summed_sparse_step
from kmodels.testing.oracle.sparse_optimizer import sparse_optimizer_step
from kmodels.testing.table_states import TableStates

# float32 against float64 over three steps of size <= 0.1 on values of
# order 1: rounding is near 1e-7.
ATOL = 1e-6
DIM = 2
INIT = keras.initializers.RandomUniform(-1.0, 1.0)
# Three batches of two bags of 4 ids (0 = padding with mask_zero=True); ids
# up to 7 arrive in the second batch, so a table of 4 rows grows to 8.
# Repeated ids, inside a bag and across bags, sum their gradients; the last
# bag of the last batch is empty.
BAGS = np.array(
    [
        [[1, 2, 2, 0], [3, 1, 0, 0]],
        [[2, 5, 7, 7], [6, 0, 0, 0]],
        [[1, 7, 3, 0], [0, 0, 0, 0]],
    ],
    "int32",
)
WEIGHTS = np.array(
    [
        [[0.5, 1.0, 2.0, 9.0], [1.5, -0.5, 3.0, 3.0]],
        [[1.0, 0.25, 2.0, 1.0], [2.0, 7.0, 7.0, 7.0]],
        [[3.0, 1.0, 0.5, 4.0], [1.0, 1.0, 1.0, 1.0]],
    ],
    "float32",
)
COMBINERS = ("sum", "mean", "sqrtn")
SGD = ("sgd", {"learning_rate": 0.1})
ADAM = ("adam", {"learning_rate": 0.05})


def _numpy(x):
    value = getattr(x, "value", x)
    return keras.ops.convert_to_numpy(value).astype(np.float64)


def _layer(combiner, optimizer=SGD, capacity=4, seed=3):
    return GrowableEmbedding(
        DIM,
        initial_capacity=capacity,
        optimizer=optimizer,
        embeddings_initializer=INIT,
        mask_zero=True,
        combiner=combiner,
        seed=seed,
    )


def _presized(capacity, seed):
    layer = _layer(None, capacity=capacity, seed=seed)
    layer.build()
    return _numpy(layer.embeddings)


def _fit(model, layer, x, batches):
    record = TableStates(layer)
    y = np.zeros((batches * 2,) + tuple(model.output.shape[1:]))
    model.compile(optimizer="sgd", loss="mse")
    model.fit(
        x,
        y,
        batch_size=2,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth(), record],
    )
    return record.states


def _assert_states(states, expected):
    assert len(states) == len(expected)
    for step, (got, want) in enumerate(zip(states, expected)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            # Before the growth the table has fewer rows than the oracle's
            # pre-sized one: compare those it has.
            np.testing.assert_allclose(
                g, w[: len(g)], atol=ATOL, rtol=0, err_msg=f"step {step}"
            )


# ------------------------------------------------------------------ forward
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("combiner", COMBINERS)
def test_forward_matches_oracle(combiner, weighted):
    """Each combiner, with and without weights, equals the oracle; padding
    (id 0) is ignored: a padded bag equals the same bag unpadded, and an
    empty bag gives zeros."""
    layer = _layer(combiner, capacity=8)
    ids = BAGS.reshape(-1, 4)
    weights = WEIGHTS.reshape(-1, 4) if weighted else None
    got = _numpy(layer(ids, weights=weights))
    table = _numpy(layer.embeddings)
    want = embedding_bag(ids, table, combiner, weights, pad_id=0)
    assert got.shape == (6, DIM)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    np.testing.assert_array_equal(got[5], np.zeros(DIM))
    # Bag [1, 2, 2, 0] without its padding.
    short = layer(
        ids[:1, :3], weights=None if weights is None else weights[:1, :3]
    )
    np.testing.assert_allclose(_numpy(short), got[:1], atol=ATOL, rtol=0)
    assert layer.compute_mask(ids) is None


def test_symbolic_shapes_and_no_padding_without_mask_zero():
    """Bags `(batch, seq, bag)` give `(batch, seq, dim)`; without
    `mask_zero` id 0 is an ordinary id of the bag."""
    layer = GrowableEmbedding(
        DIM, initial_capacity=4, combiner="mean", embeddings_initializer=INIT
    )
    ids = keras.Input(shape=(3, 5), dtype="int32")
    assert tuple(layer(ids).shape) == (None, 3, DIM)
    got = _numpy(layer(np.array([[0, 1]])))
    table = _numpy(layer.embeddings)
    np.testing.assert_allclose(
        got, [(table[0] + table[1]) / 2], atol=ATOL, rtol=0
    )


# ----------------------------------------------------------------- training
# (combiner, weighted, table optimizer, oracle keyword arguments).
TRAINING = {
    "sum_sgd": ("sum", False, SGD, dict(kind="sgd", learning_rate=0.1)),
    "mean_weighted_adam": (
        "mean",
        True,
        ADAM,
        dict(kind="adam", learning_rate=0.05),
    ),
    "sqrtn_weighted_sgd": (
        "sqrtn",
        True,
        SGD,
        dict(kind="sgd", learning_rate=0.1),
    ),
}


@pytest.mark.parametrize("case", sorted(TRAINING))
def test_fit_matches_oracle_each_step_while_growing(case):
    """`fit` on bags equals the oracle after every step while the table
    grows from 4 to 8 rows in the second step (the oracle's table is
    pre-sized to 8); the padding row 0 and its slots never move."""
    combiner, weighted, optimizer, kwargs = TRAINING[case]
    layer = _layer(combiner, optimizer)
    ids = keras.Input(shape=(4,), dtype="int32")
    inputs, x = ids, BAGS.reshape(-1, 4)
    if weighted:
        w = keras.Input(shape=(4,))
        inputs, x = [ids, w], [x, WEIGHTS.reshape(-1, 4)]
        out = layer(ids, weights=w)
    else:
        out = layer(ids)
    states = _fit(keras.Model(inputs, out), layer, x, len(BAGS))
    assert layer.capacity == 8 and layer.growths == 1
    table = _presized(8, seed=3)
    slots = [np.zeros_like(table) for _ in layer.trained_slots]
    expected = []
    for k, bags in enumerate(BAGS):
        weights = WEIGHTS[k] if weighted else None
        out = embedding_bag(bags, table, combiner, weights, pad_id=0)
        # MSE towards zeros over 2 bags of DIM columns.
        grads = 2.0 * out / (2 * DIM)
        rows, row_grads = embedding_bag_row_grads(
            bags, combiner, grads, weights, pad_id=0
        )
        table, slots = sparse_optimizer_step(
            table, slots, k, rows, row_grads, **kwargs
        )
        expected.append([table, *slots])
    _assert_states(states, expected)
    np.testing.assert_array_equal(states[-1][0][0], _presized(8, seed=3)[0])
    for slot in states[-1][1:]:
        np.testing.assert_array_equal(slot[0], np.zeros(DIM))
    assert float(_numpy(layer.step)) == len(BAGS)


# ------------------------------------------------------------ shared tables
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_shared_table_sums_gradients_before_one_update(optimizer):
    """One table shared by a history bag (mean) and a candidate item (a
    bag of one id), called once on the list of both: each step equals the
    oracle's single sparse update on the gradients of both features summed
    per row (one optimizer step per train step), while the table grows."""
    rule, kwargs = {
        "sgd": (SGD, dict(kind="sgd", learning_rate=0.1)),
        "adam": (ADAM, dict(kind="adam", learning_rate=0.05)),
    }[optimizer]
    layer = _layer("mean", rule)
    history = keras.Input(shape=(4,), dtype="int32")
    item = keras.Input(shape=(1,), dtype="int32")
    h, i = layer([history, item])
    model = keras.Model([history, item], keras.layers.Concatenate()([h, i]))
    items = np.array([[[2], [1]], [[7], [2]], [[3], [5]]], "int32")
    x = [BAGS.reshape(-1, 4), items.reshape(-1, 1)]
    states = _fit(model, layer, x, len(BAGS))
    assert layer.capacity == 8
    assert float(_numpy(layer.step)) == len(BAGS)
    table = _presized(8, seed=3)
    slots = [np.zeros_like(table) for _ in layer.trained_slots]
    expected = []
    for k in range(len(BAGS)):
        features = []
        for bags in (BAGS[k], items[k]):
            out = embedding_bag(bags, table, "mean", pad_id=0)
            # MSE towards zeros over 2 examples of 2 * DIM columns.
            grads = 2.0 * out / (2 * 2 * DIM)
            features.append(
                embedding_bag_row_grads(bags, "mean", grads, pad_id=0)
            )
        table, slots = summed_sparse_step(table, slots, k, features, **kwargs)
        expected.append([table, *slots])
    _assert_states(states, expected)
    if optimizer == "adam":
        # Summing matters: two updates per step (one per feature) end far
        # from the run.
        far, far_slots = _presized(8, seed=3), [np.zeros((8, DIM))] * 2
        for k in range(len(BAGS)):
            for bags in (BAGS[k], items[k]):
                out = embedding_bag(bags, far, "mean", pad_id=0)
                rows, g = embedding_bag_row_grads(
                    bags, "mean", out / (2 * DIM), pad_id=0
                )
                far, far_slots = sparse_optimizer_step(
                    far, far_slots, 2 * k, rows, g, **kwargs
                )
        assert np.abs(far - states[-1][0]).max() > 100 * ATOL


def test_table_called_twice_in_a_model_is_refused():
    """Two calls of one table in a model would each run the sparse
    optimizer: `EmbeddingGrowth` refuses it and names the one-call form."""
    layer = _layer("sum")
    a = keras.Input(shape=(4,), dtype="int32")
    b = keras.Input(shape=(4,), dtype="int32")
    model = keras.Model([a, b], layer(a) + layer(b))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"called 2 times .*table\(\[hist"):
        model.fit(
            [BAGS[0], BAGS[1]],
            np.zeros((2, DIM)),
            verbose=0,
            callbacks=[EmbeddingGrowth()],
        )


# ------------------------------------------------------------------- saving
def test_config_and_keras_file_keep_the_combiner(tmp_path):
    layer = _layer("sqrtn", ADAM)
    ids = keras.Input(shape=(4,), dtype="int32")
    w = keras.Input(shape=(4,))
    model = keras.Model([ids, w], layer(ids, weights=w))
    x = [BAGS.reshape(-1, 4), WEIGHTS.reshape(-1, 4)]
    _fit(model, layer, x, len(BAGS))
    assert layer.get_config()["combiner"] == "sqrtn"
    assert GrowableEmbedding.from_config(layer.get_config()).combiner == "sqrtn"
    path = str(tmp_path / "bags.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    table = [v for v in loaded.layers if isinstance(v, GrowableEmbedding)][0]
    assert table.combiner == "sqrtn" and table.capacity == 8
    np.testing.assert_allclose(
        _numpy(loaded.predict(x, verbose=0)),
        _numpy(model.predict(x, verbose=0)),
        atol=0,
        rtol=0,
    )


# --------------------------------------------------------------- bad input
def test_unknown_combiner_is_refused():
    with pytest.raises(
        ValueError,
        match=r"`combiner` must be one of \('sum', 'mean', 'sqrtn'\); got "
        r"'max'",
    ):
        GrowableEmbedding(DIM, combiner="max")


@pytest.mark.parametrize(
    "case, message",
    [
        ("weights_shape", r"`weights` must have the shape of the ids .*"),
        ("no_combiner", r"got `weights` but has combiner=None"),
        ("flat_ids", r"expects padded bags of ids of shape \(batch, bag\)"),
        ("ragged", r"expects padded `ids` .*lists of different lengths"),
        ("weights_list", r"got 2 features: `weights` must be None or a list"),
    ],
)
def test_bad_inputs_are_refused(case, message):
    layer = _layer(None if case == "no_combiner" else "mean")
    ids = BAGS[0]
    calls = {
        "weights_shape": lambda: layer(ids, weights=WEIGHTS[0][:, :3]),
        "no_combiner": lambda: layer(ids, weights=WEIGHTS[0]),
        "flat_ids": lambda: layer(ids[0]),
        "ragged": lambda: layer([[1, 2, 3], [4]]),
        "weights_list": lambda: layer([ids, ids], weights=WEIGHTS[0]),
    }
    with pytest.raises(ValueError, match=message):
        calls[case]()
    # Symbolic calls are refused the same way.
    if case == "weights_shape":
        with pytest.raises(ValueError, match=message):
            layer(keras.Input((4,), dtype="int32"), weights=keras.Input((3,)))


def test_ragged_tensor_is_refused():
    """Bags are padded on every backend; TensorFlow's ragged type (the
    only backend that has one) is refused with a hint to pad it."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("tf.RaggedTensor exists on TensorFlow only")
    import tensorflow as tf

    ragged = tf.ragged.constant([[1, 2, 3], [4]])
    with pytest.raises(TypeError, match=r"expects padded `ids` .*RaggedTensor"):
        _layer("sum")(ragged)


@pytest.mark.parametrize("method", ["fit", "predict", "evaluate"])
def test_bad_bag_weights_are_refused_before_the_compiled_step(method):
    """With the contract hook, a `weights` shape that does not match the
    ids is refused before any compiled step: same error on every backend,
    every weight and optimizer variable bit-identical (on JAX an error
    inside the step would leave the variables without values), and the
    next good call works."""
    ids = keras.Input((3,), dtype="int32")
    w = keras.Input((3,))
    table = GrowableEmbedding(
        8, 4, mask_zero=True, combiner="mean", name="bags"
    )
    model = keras.Model([ids, w], keras.layers.Dense(1)(table(ids, weights=w)))
    model.compile("sgd", "mse")
    kmodels.contracts.enforce(model)
    x = np.array([[1, 2, 0], [3, 0, 0]])
    good = np.ones((2, 3), "float32")
    y = np.zeros((2, 1))
    model.fit([x, good], y, verbose=0, callbacks=[EmbeddingGrowth()])
    variables = model.variables + model.optimizer.variables
    before = [np.array(keras.ops.convert_to_numpy(v.value)) for v in variables]
    bad = [x, np.ones((2, 4), "float32")]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "GrowableEmbedding 'bags': `weights` must have the shape of the "
            "ids (one weight per id), (2, 3); got (2, 4)."
        ),
    ):
        getattr(model, method)(
            bad, *([y] if method != "predict" else []), verbose=0
        )
    for v, b in zip(variables, before):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(v.value), b)
    history = model.fit([x, good], y, verbose=0, callbacks=[EmbeddingGrowth()])
    assert np.isfinite(history.history["loss"][0])


# ------------------------------------------------------ bag weights
NAN_WEIGHTS = np.array([[1.0, np.nan, 1.0], [1.0, 1.0, 0.0]], "float32")
INF_WEIGHTS = np.array([[1.0, 1.0, 1.0], [np.inf, 1.0, 0.0]], "float32")
# Bag 0 cancels out (1 - 1); bag 1 has a padding id whose weight is ignored.
CANCEL_WEIGHTS = np.array([[1.0, -1.0, 0.0], [2.0, 1.0, -5.0]], "float32")
BAG_IDS = np.array([[1, 2, 3], [3, 1, 0]], "int32")


def _finite_message(combiner, values):
    return (
        f"GrowableEmbedding 'bags' expects finite bag `weights` (combiner="
        f"'{combiner}'); got {values}: a NaN or infinite weight makes the "
        "bag's vector, the loss and the rows it trains NaN."
    )


CANCEL_MESSAGE = (
    "GrowableEmbedding 'bags' has combiner='mean', which divides by the sum "
    "of a bag's `weights`: it must be > 0 in every bag with a non-zero "
    "weight; got sums [0.0]. Use combiner='sum' or 'sqrtn' for weights that "
    "cancel out."
)


@pytest.mark.parametrize("combiner", COMBINERS)
def test_non_finite_or_cancelling_bag_weights_are_refused(combiner):
    """NaN and infinite weights would turn the bag, the loss and the rows
    it trains into NaN: refused for every combiner. A "mean" bag whose
    weights sum to 0 (or less) has no mean: refused; "sum" and "sqrtn"
    take signed weights. The same error on every backend, eagerly and in a
    plain functional model's compiled steps, with no weight changed."""
    keras.utils.set_random_seed(7)
    table = GrowableEmbedding(
        DIM, initial_capacity=8, mask_zero=True, combiner=combiner, name="bags"
    )
    ids = keras.Input((3,), dtype="int32")
    w = keras.Input((3,))
    model = keras.Model([ids, w], table(ids, weights=w))
    model.compile("sgd", "mse")
    y = np.zeros((2, DIM))
    # A first good fit: kmodels checks the model's batches from then on.
    model.fit([BAG_IDS, np.ones((2, 3), "float32")], y, verbose=0)
    cases = [
        (NAN_WEIGHTS, _finite_message(combiner, "[nan]")),
        (INF_WEIGHTS, _finite_message(combiner, "[inf]")),
    ]
    if combiner == "mean":
        cases.append((CANCEL_WEIGHTS, CANCEL_MESSAGE))
    else:
        out = _numpy(table(BAG_IDS, weights=CANCEL_WEIGHTS))
        assert np.all(np.isfinite(out))
    variables = model.variables + model.optimizer.variables
    before = [np.array(keras.ops.convert_to_numpy(v.value)) for v in variables]
    for weights, message in cases:
        for run in (
            lambda: table(BAG_IDS, weights=weights),
            lambda: table(BAG_IDS, weights=weights, training=True),
            lambda: model.fit([BAG_IDS, weights], y, verbose=0),
            lambda: model.predict([BAG_IDS, weights], verbose=0),
        ):
            with raises_exactly(ValueError, message):
                run()
    for v, b in zip(variables, before):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(v.value), b)


def test_table_called_twice_without_the_callback_is_refused():
    """Without `EmbeddingGrowth`, two training calls of one table in a step
    would each run its sparse update (on JAX each adds its own updated
    table): a functional model that calls it twice is refused to train, on
    every backend, before any variable changes; inference works."""
    keras.utils.set_random_seed(8)
    layer = _layer("sum")
    a = keras.Input(shape=(4,), dtype="int32")
    b = keras.Input(shape=(4,), dtype="int32")
    model = keras.Model([a, b], layer(a) + layer(b))
    model.compile(optimizer="sgd", loss="mse")
    x = [BAGS[0], BAGS[2]]
    expected = _numpy(layer(BAGS[0])) + _numpy(layer(BAGS[2]))
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=ATOL)
    message = (
        f"GrowableEmbedding '{layer.name}' is called 2 times in model "
        f"'{model.name}'; a table takes one call per step (its sparse update "
        "runs once per call). Share it between features with one call on a "
        "list of ids, e.g. `table([history, item])`, which returns one "
        "output per feature and sums their gradients before the single "
        "update."
    )
    for run in (
        lambda: model.fit(x, np.zeros((2, DIM)), verbose=0),
        lambda: model.train_on_batch(x, np.zeros((2, DIM))),
    ):
        variables = model.variables + model.optimizer.variables
        before = [_numpy(v) for v in variables]
        with pytest.raises(ValueError) as caught:
            run()
        assert str(caught.value) == message
        variables = model.variables + model.optimizer.variables
        for v, old in zip(variables, before):
            np.testing.assert_array_equal(_numpy(v), old)
