"""`kmodels.backend.optimizers.fuse_adam`: torch's fused Adam kernel gives
the numbers of Keras' Adam (a NumPy oracle over several steps, on every
backend), on the user's own optimizer object, which saves and loads as
before."""

import keras
import numpy as np
import pytest

from kmodels.backend import optimizers
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_loss

np_ = keras.ops.convert_to_numpy
TORCH = keras.backend.backend() == "torch"
STEPS = 6
# float32 moments and weights of O(1) over 6 steps; torch's kernel and
# Keras' passes round differently: measured < 3e-7.
ATOL, RTOL = 1e-6, 1e-6


def _numpy_adam(weights, grads, lr, beta_1, beta_2, eps, amsgrad, decay):
    """Keras' Adam in float64: epsilon added to the root of the raw
    second moment, the bias corrections folded into the step size, with
    the betas in the variables' dtype (Keras raises float32 betas to the
    power t: 1 - 0.999 is 1.3e-5 off in float32, 6e-6 of the first step);
    `lr(t)` the learning rate of step `t` (0-based); `decay`: decoupled
    weight decay, `w -= w * decay * lr` before the update."""
    w = [x.astype("float64") for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    v_hat = [np.zeros_like(x) for x in w]
    for step, gs in enumerate(grads):
        t = step + 1
        rate = lr(step)
        power_1 = np.float64(np.float32(beta_1)) ** t
        power_2 = np.float64(np.float32(beta_2)) ** t
        alpha = rate * np.sqrt(1 - power_2) / (1 - power_1)
        for i, g in enumerate(gs):
            w[i] = w[i] - w[i] * decay * rate
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            v_hat[i] = np.maximum(v_hat[i], v[i])
            root = np.sqrt(v_hat[i] if amsgrad else v[i])
            w[i] = w[i] - alpha * m[i] / (root + eps)
    return w, m, v


CASES = {
    "defaults": dict(),
    "betas_epsilon": dict(beta_1=0.8, beta_2=0.99, epsilon=1e-4),
    "schedule": dict(schedule=True),
    "weight_decay": dict(weight_decay=0.1),
    # The fused kernel does not apply: Keras' own update runs.
    "amsgrad": dict(amsgrad=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_adam_matches_the_numpy_oracle(rng, case):
    options = dict(CASES[case])
    beta_1 = options.get("beta_1", 0.9)
    beta_2 = options.get("beta_2", 0.999)
    eps = options.get("epsilon", 1e-7)
    decay = options.get("weight_decay", 0.0)
    if options.pop("schedule", False):
        rate = keras.optimizers.schedules.ExponentialDecay(0.05, 2, 0.5)

        def lr(step):
            return 0.05 * 0.5 ** (step / 2)
    else:
        rate = 0.05

        def lr(step):
            return 0.05

    shapes = [(5, 3), (3,)]
    weights = [rng.normal(size=s).astype("float32") for s in shapes]
    # Gradients of several magnitudes, so epsilon's place matters.
    grads = [
        [
            (rng.normal(size=s) * 10.0 ** rng.uniform(-4, 0)).astype("float32")
            for s in shapes
        ]
        for _ in range(STEPS)
    ]
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
    adam = keras.optimizers.Adam(learning_rate=rate, **options)
    assert optimizers.fuse_adam(adam) == TORCH
    for gs in grads:
        adam.apply([keras.ops.convert_to_tensor(g) for g in gs], variables)

    w, m, v = _numpy_adam(
        weights, grads, lr, beta_1, beta_2, eps, options.get("amsgrad"), decay
    )
    assert int(np_(adam.iterations)) == STEPS
    slots = {x.path.split("/")[-1]: np_(x) for x in adam.variables}
    for i, variable in enumerate(variables):
        np.testing.assert_allclose(np_(variable), w[i], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(
            slots[f"w{i}_momentum"], m[i], rtol=RTOL, atol=ATOL
        )
        np.testing.assert_allclose(
            slots[f"w{i}_velocity"], v[i], rtol=RTOL, atol=ATOL
        )


def test_fuse_adam_leaves_other_optimizers_alone():
    sgd = keras.optimizers.SGD(0.1)
    assert optimizers.fuse_adam(sgd) is False
    assert optimizers.fuse_adam(None) is False
    # A subclass may change the update: it keeps its own.
    subclass = type("MyAdam", (type(keras.optimizers.Adam()),), {})
    assert optimizers.fuse_adam(subclass()) is False


@pytest.mark.skipif(
    not TORCH,
    reason="TensorFlow and JAX keep Keras' own Adam (fuse_adam returns "
    "False there, asserted above), and a Translator's compile costs 12-24 s "
    "there; resuming from a .keras file on every backend is "
    "backends_tests/reliability/portable_optimizer_test.py's",
)
def test_translator_trains_and_resumes_with_the_users_optimizer(tmp_path):
    # kmodels' models fuse at compile; the user's object stays the model's
    # optimizer, and a `.keras` file resumes with the same moments: one
    # more step of the loaded model matches one more of the original.
    keras.utils.set_random_seed(0)
    model = Translator(12, 12, 8)
    rng = np.random.default_rng(0)
    context = rng.integers(1, 12, (4, 5))
    target = rng.integers(1, 12, (4, 6))
    target[:2, 4:] = 0
    x, y = (context, target[:, :-1]), target[:, 1:]
    model(x)
    adam = keras.optimizers.Adam(0.01)
    model.compile(optimizer=adam, loss=masked_loss)
    assert model.optimizer is adam
    assert optimizers.fuse_adam(adam) is True
    for _ in range(2):
        model.train_on_batch(x, y)
    path = tmp_path / "translator.keras"
    model.save(path)
    from kmodels.saving import load_model

    loaded = load_model(path)
    assert optimizers.fuse_adam(loaded.optimizer) is True
    for a, b in zip(adam.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(np_(a), np_(b))
    model.train_on_batch(x, y)
    loaded.train_on_batch(x, y)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_allclose(np_(a), np_(b), rtol=0, atol=1e-6)
