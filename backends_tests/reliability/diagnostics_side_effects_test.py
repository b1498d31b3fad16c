"""kmodels.diagnostics changes no variable of the model, reports the same
rows on every backend, flags NaN/inf gradients and refuses class ids
outside the model's output width (issue #16 item 5, issue #11)."""

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.callbacks import GradientFlowCheck
from kmodels.diagnostics import GradientFlowError
from kmodels.diagnostics import check_gradient_flow
from kmodels.diagnostics import gradient_report
from kmodels.layers import GrowableEmbedding
from kmodels.models import recommender
from kmodels.seq2seq.losses import masked_loss
from kmodels.seq2seq.translator import Translator

BACKEND = keras.backend.backend()
# Users 1, 2, 3 and 9: id 9 is past the capacity (8) of the user table.
X_REC = {
    "user": np.array([1, 2, 3, 9], "int32"),
    "item": np.array([1, 2, 3, 4], "int32"),
}
Y_REC = np.array([[1.0], [0.0], [1.0], [0.0]], "float32")


def _state(model):
    """Every variable of the model and its optimizer as NumPy, with the
    capacity and growth count of each GrowableEmbedding."""
    variables = list(model.variables)
    if model.optimizer is not None and model.optimizer.built:
        variables += list(model.optimizer.variables)
    values = [
        (v.path, np.array(keras.ops.convert_to_numpy(v.value)))
        for v in variables
    ]
    tables = [
        (layer.name, layer.capacity, layer.growths)
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, GrowableEmbedding)
    ]
    return values, tables


def _assert_same_state(before, after, same_model=True):
    values_b, tables_b = before
    values_a, tables_a = after
    assert tables_a == tables_b
    assert len(values_a) == len(values_b)
    if same_model:
        assert [p for p, _ in values_a] == [p for p, _ in values_b]
    for (path, b), (_, a) in zip(values_b, values_a):
        assert a.shape == b.shape, path
        # Bit-identical, NaN included.
        assert a.tobytes() == b.tobytes(), path


def _trained_recommender():
    """A recommender after one fit: the tables' Adam slots and step
    counters and the model optimizer's iterations are non-zero."""
    model = recommender(embedding_dim=4, initial_capacity=8, seed=3)
    x = {
        "user": np.array([1, 2, 3, 4], "int32"),
        "item": np.array([1, 2, 3, 5], "int32"),
    }
    model.fit(
        x,
        Y_REC,
        batch_size=4,
        epochs=1,
        verbose=0,
        shuffle=False,
        callbacks=[EmbeddingGrowth()],
    )
    return model


def _numpy_recommender_gradients(model):
    """Loss and dense table gradients of the recommender on X_REC/Y_REC,
    computed in float64 NumPy (ids past a table's capacity: zero vectors)."""
    users = keras.ops.convert_to_numpy(
        model.get_layer("users").embeddings.value
    ).astype("float64")
    items = keras.ops.convert_to_numpy(
        model.get_layer("items").embeddings.value
    ).astype("float64")
    u_ids, i_ids = X_REC["user"], X_REC["item"]
    u = np.stack([users[i] if i < len(users) else np.zeros(4) for i in u_ids])
    v = np.stack([items[i] if i < len(items) else np.zeros(4) for i in i_ids])
    z = (u * v).sum(1)
    y = Y_REC[:, 0].astype("float64")
    loss = np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))))
    dz = (1.0 / (1.0 + np.exp(-z)) - y) / len(z)
    g_users, g_items = np.zeros_like(users), np.zeros_like(items)
    for k in range(len(z)):
        if u_ids[k] < len(users):
            g_users[u_ids[k]] += dz[k] * v[k]
        if i_ids[k] < len(items):
            g_items[i_ids[k]] += dz[k] * u[k]
    return loss, g_users, g_items


def test_recommender_report_changes_nothing_and_matches_numpy():
    keras.utils.set_random_seed(0)
    model = _trained_recommender()
    before = _state(model)
    report = gradient_report(model, X_REC, Y_REC, verbose=False)
    _assert_same_state(before, _state(model))
    checked = check_gradient_flow(model, X_REC, Y_REC)
    _assert_same_state(before, _state(model))
    # One row per table, the same on every backend: slots and step
    # counters are the table optimizer's state, not reported.
    for r in (report, checked):
        assert [(v.path, v.layer, v.shape, v.status) for v in r.variables] == [
            ("users/embeddings", "users", (8, 4), "ok"),
            ("items/embeddings", "items", (8, 4), "ok"),
        ]
        assert r.output_depends_on_input is True
    loss, g_users, g_items = _numpy_recommender_gradients(model)
    # float32 forward/backward against float64: 1e-5 relative.
    np.testing.assert_allclose(report.loss, loss, rtol=1e-5)
    np.testing.assert_allclose(
        [v.norm for v in report.variables],
        [np.linalg.norm(g_users), np.linalg.norm(g_items)],
        rtol=1e-5,
    )


def test_callback_changes_nothing_fit_is_the_same_with_and_without():
    keras.utils.set_random_seed(0)
    with_check = _trained_recommender()
    keras.utils.set_random_seed(0)
    without = _trained_recommender()
    _assert_same_state(_state(without), _state(with_check), False)
    check = GradientFlowCheck((X_REC, Y_REC))
    x = {
        "user": np.array([5, 1, 2, 6], "int32"),
        "item": np.array([1, 6, 2, 3], "int32"),
    }
    for model, callbacks in ((with_check, [check]), (without, [])):
        model.fit(
            x,
            Y_REC,
            batch_size=4,
            epochs=1,
            verbose=0,
            shuffle=False,
            callbacks=callbacks + [EmbeddingGrowth()],
        )
    assert check.report.ok
    _assert_same_state(_state(without), _state(with_check), False)


def _translator():
    rng = np.random.default_rng(0)
    context = rng.integers(1, 7, (3, 5)).astype("int32")
    target = rng.integers(3, 6, (3, 5)).astype("int32")
    target[:, 0] = 1
    model = Translator(7, 6, 3, start_id=1, end_id=2)
    model.compile(keras.optimizers.Adam(0.05), loss=masked_loss)
    data = ((context, target[:, :-1]), target[:, 1:])
    model(data[0])
    model.optimizer.build(model.trainable_variables)
    return model, data


def test_translator_report_changes_nothing():
    keras.utils.set_random_seed(0)
    model, (x, y) = _translator()
    before = _state(model)
    report = check_gradient_flow(model, x, y)
    _assert_same_state(before, _state(model))
    assert report.ok
    assert [v.path for v in report.variables] == [
        v.path for v in model.trainable_variables
    ]
    assert {v.status for v in report.variables} == {"ok"}


def test_batch_norm_and_dropout_state_is_put_back():
    """Training-mode calls write batch-norm statistics and the dropout seed
    eagerly on TensorFlow and torch: the report puts them back."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(4),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(2),
        ]
    )
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [3.0, 0.0, 1.0]])
    y = np.array([0, 1, 1])
    before = _state(model)
    report = gradient_report(model, x, y, verbose=False)
    _assert_same_state(before, _state(model))
    assert [(v.layer, v.path.split("/")[-1]) for v in report.variables] == [
        ("dense", "kernel"),
        ("dense", "bias"),
        ("batch_normalization", "gamma"),
        ("batch_normalization", "beta"),
        ("dense_1", "kernel"),
        ("dense_1", "bias"),
    ]


def _dense_model():
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(3, name="dense")]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(True))
    return model


X = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [3.0, 0.0, 1.0]], "float32")


def _nan_gradient_loss(y_true, y_pred):
    # sqrt(p - p) = 0, but its gradient is inf * 0 - inf * 0: NaN.
    return keras.ops.mean(keras.ops.sqrt(y_pred - y_pred))


def _inf_loss(y_true, y_pred):
    # log(0) = -inf: the loss is inf, its gradient NaN.
    return keras.ops.mean(-keras.ops.log(y_pred * 0.0))


@pytest.mark.parametrize(
    "loss_fn, loss_text",
    [(_nan_gradient_loss, "0.0"), (_inf_loss, "inf")],
    ids=["nan-gradient", "inf-loss"],
)
def test_nonfinite_gradients_fail_the_check(loss_fn, loss_text):
    model = _dense_model()
    before = _state(model)
    report = gradient_report(model, X, np.array([0, 1, 2]), loss=loss_fn)
    assert [(v.path, v.status) for v in report.variables] == [
        ("sequential/dense/kernel", "nonfinite"),
        ("sequential/dense/bias", "nonfinite"),
    ]
    assert report.nonfinite == [
        "sequential/dense/kernel",
        "sequential/dense/bias",
    ]
    assert report.disconnected == []
    assert not report.ok
    with pytest.raises(GradientFlowError) as e:
        check_gradient_flow(model, X, np.array([0, 1, 2]), loss=loss_fn)
    message = str(e.value)
    assert message.startswith(
        "Gradient flow check failed: 2 trainable variable(s) have a NaN or "
        f"infinite gradient (loss {loss_text}): ['sequential/dense/kernel', "
        "'sequential/dense/bias']. Most likely cause: "
    )
    _assert_same_state(before, _state(model))


@pytest.mark.parametrize("label", [3, 7, -1])
@pytest.mark.parametrize("function", [check_gradient_flow, gradient_report])
def test_label_outside_the_output_width_raises_on_every_backend(
    function, label
):
    model = _dense_model()
    before = _state(model)
    y = np.array([0, label, 2])
    expected = (
        "gradient_report: `y` must hold class ids in [0, 3) for the sparse "
        "categorical loss 'sparse_categorical_crossentropy', 3 being the "
        "size of the last axis of the model's output; got labels from "
        f"{min(label, 0)} to {max(label, 2)}. Does the output layer have "
        "one unit per class, or are the labels 1-based?"
    )
    with pytest.raises(ValueError) as e:
        function(model, X, y)
    assert str(e.value) == expected
    _assert_same_state(before, _state(model))


def test_ignore_class_and_in_range_labels_pass():
    model = _dense_model()
    loss = keras.losses.SparseCategoricalCrossentropy(True, ignore_class=-1)
    report = check_gradient_flow(model, X, np.array([0, -1, 2]), loss=loss)
    assert report.ok
    report = check_gradient_flow(
        model, X, np.array([0, 1, 2]), loss="sparse_categorical_crossentropy"
    )
    assert report.ok
