"""kmodels.diagnostics on the wiring of seed 003 and on correct models,
and the backend autodiff behind them against finite differences."""

import warnings

import keras
import numpy as np
import pytest

from examples.position_embedding import correct_model
from examples.position_embedding import positions_only_model
from kmodels.backend.gradients import variable_gradients
from kmodels.callbacks import GradientFlowCheck
from kmodels.diagnostics import GradientFlowError
from kmodels.diagnostics import check_gradient_flow
from kmodels.diagnostics import gradient_report
from kmodels.diagnostics.gradient_flow import POSITIONS_ONLY_CAUSE
from kmodels.testing import oracle

BACKEND = keras.backend.backend()
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
SIZES = dict(embedding_dim=4, intermediate_dim=8, num_heads=2)
X = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [2, 2, 5, 1], [5, 1, 1, 5]], "int32")
Y = np.array([0, 1, 0, 1], "int32")
# How each backend reports the token embedding's missing gradient: TF's tape
# and torch autograd return None; jax.grad returns an all-zero array.
EXPECTED_STATUS = {"tensorflow": "missing", "torch": "missing", "jax": "zero"}


def test_positions_only_wiring_is_caught():
    model = positions_only_model(6, 4, **SIZES)
    with pytest.raises(GradientFlowError) as e:
        check_gradient_flow(model, X, Y, loss=LOSS)
    report = e.value.report
    assert report.disconnected == ["embedding/embeddings"]
    statuses = {v.path: v.status for v in report.variables}
    assert statuses["embedding/embeddings"] == EXPECTED_STATUS[BACKEND]
    assert statuses["position_embedding/embeddings"] == "ok"
    assert report.output_depends_on_input is False
    message = str(e.value)
    assert POSITIONS_ONLY_CAUSE in message
    assert "['embedding/embeddings']" in message
    assert "layer 'embedding' feeds only 'position_embedding'" in message
    assert "does not depend on its input" in message


def test_positions_only_outputs_are_identical_for_different_inputs():
    model = positions_only_model(6, 4, **SIZES)
    out = keras.ops.convert_to_numpy(model(X))
    # Every row is computed from the same position vectors: bit-identical.
    np.testing.assert_array_equal(out, np.broadcast_to(out[:1], out.shape))


def test_correct_composition_passes():
    keras.utils.set_random_seed(0)
    model = correct_model(6, 4, **SIZES)
    report = check_gradient_flow(model, X, Y, loss=LOSS)
    assert report.disconnected == []
    assert all(v.norm > 0 for v in report.variables)
    assert report.output_depends_on_input is True
    assert report.message() == "Gradient flow check passed."


def test_callback_stops_fit_on_seed_003_wiring():
    model = positions_only_model(6, 4, **SIZES)
    model.compile(keras.optimizers.SGD(0.1), LOSS)
    before = [keras.ops.convert_to_numpy(w) for w in model.weights]
    with pytest.raises(GradientFlowError, match="token embedding output"):
        model.fit(
            X, Y, epochs=1, verbose=0, callbacks=[GradientFlowCheck((X, Y))]
        )
    after = [keras.ops.convert_to_numpy(w) for w in model.weights]
    # Raised from on_train_begin: not one step was taken.
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_callback_lets_a_correct_model_train():
    keras.utils.set_random_seed(0)
    model = correct_model(6, 4, **SIZES)
    model.compile(keras.optimizers.SGD(0.1), LOSS)
    check = GradientFlowCheck((X, Y))
    history = model.fit(X, Y, epochs=2, verbose=0, callbacks=[check])
    assert len(history.history["loss"]) == 2
    assert check.report.ok


def test_gradients_do_not_exist_warning_by_backend():
    """Training the seed's model: TF and torch warn, JAX is silent (its
    gradient is zeros, not None). kmodels' check catches all three."""
    model = positions_only_model(6, 4, **SIZES)
    model.compile(keras.optimizers.SGD(0.1), LOSS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, Y, epochs=1, verbose=0)
    warned = any("Gradients do not exist" in str(w.message) for w in caught)
    assert warned == (BACKEND in ("tensorflow", "torch"))


def test_generic_cause_for_other_disconnections():
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(2, name="hidden")(inputs)
    blocked = keras.ops.stop_gradient(hidden)
    outputs = keras.layers.Dense(2, name="head")(blocked)
    model = keras.Model(inputs, outputs)
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], "float32")
    with pytest.raises(GradientFlowError) as e:
        check_gradient_flow(model, x, np.array([0, 1]), loss=LOSS)
    assert e.value.report.disconnected == ["hidden/kernel", "hidden/bias"]
    assert e.value.report.output_depends_on_input is True
    assert "does not reach the loss" in str(e.value)


def test_needs_a_loss():
    model = correct_model(6, 4, **SIZES)
    with pytest.raises(ValueError, match="gradient_report needs a loss"):
        gradient_report(model, X, Y, verbose=False)


def test_uses_the_compiled_loss(capsys):
    keras.utils.set_random_seed(0)
    model = correct_model(6, 4, **SIZES)
    model.compile("sgd", LOSS)
    report = gradient_report(model, X, Y)
    expected = float(LOSS(Y, model(X)))
    # Same model, same inputs, training=True without dropout: float32 noise.
    np.testing.assert_allclose(report.loss, expected, rtol=1e-5)
    table = capsys.readouterr().out
    assert "positional_embedding/embedding/embeddings" in table
    assert "output depends on input: yes" in table


def test_backend_gradients_match_finite_differences(rng):
    """The backend modules against float64 central differences of the same
    loss (mean squared error of a Dense layer)."""
    x = rng.normal(size=(4, 3)).astype("float32")
    y = rng.normal(size=(4, 2)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    kernel, bias = (w.astype("float64") for w in model.get_weights())
    loss, (g_kernel, g_bias) = variable_gradients(
        model, keras.losses.MeanSquaredError(), x, y
    )

    def mse(params):
        return float(np.mean((oracle.dense(x, *params) - y) ** 2))

    n_kernel, n_bias = oracle.numerical_gradient(mse, [kernel, bias])
    # float32 forward/backward vs float64 differences of O(1) values: 1e-5.
    np.testing.assert_allclose(loss, mse([kernel, bias]), rtol=1e-5)
    np.testing.assert_allclose(g_kernel, n_kernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g_bias, n_bias, rtol=1e-4, atol=1e-5)
