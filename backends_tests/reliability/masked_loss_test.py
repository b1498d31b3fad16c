"""`masked_loss` on empty masks and with `sample_weight` (issue #16).

An all-padding batch gives loss 0 and zero gradients (it used to give NaN
and, through `fit`, NaN weights on TensorFlow and torch); `sample_weight`
weights each example's tokens (it used to scale the batch mean). Expected
numbers come from `kmodels.testing.oracle.masked_cross_entropy` (NumPy,
float64).
"""

import re

import keras
import numpy as np
import pytest

from kmodels.backend.gradients import variable_gradients
from kmodels.seq2seq import MaskedLoss
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_acc
from kmodels.seq2seq import masked_loss
from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy
VOCAB, UNITS, S, T = 20, 4, 5, 4
# A log-softmax and a weighted mean over < 20 float32 terms of O(1):
# ~1e-7 measured against the float64 oracle.
TOL = 1e-6


def _translator():
    keras.utils.set_random_seed(7)
    return Translator(VOCAB, VOCAB, units=UNITS)


def _tagger():
    """Logits `(batch, T, VOCAB)` from ids `(batch, T)`: the smallest model
    `masked_loss` applies to, cheap to compile on every backend."""
    keras.utils.set_random_seed(8)
    return keras.Sequential(
        [
            keras.Input((T,), dtype="int32"),
            keras.layers.Embedding(VOCAB, UNITS),
            keras.layers.Dense(VOCAB),
        ]
    )


def _batch(rng, examples=2):
    context = rng.integers(4, VOCAB, (examples, S))
    context[:, -1] = 0
    target_in = rng.integers(4, VOCAB, (examples, T))
    target_out = rng.integers(4, VOCAB, (examples, T))
    target_out[0, 3:] = 0
    target_out[-1, 2:] = 0
    return (context, target_in), target_out


def _weights(model):
    return [np.array(np_(v.value)) for v in model.trainable_variables]


def _loss(y, logits, sample_weight=None):
    return float(np_(masked_loss(y, logits, sample_weight=sample_weight)))


# Empty masks -------------------------------------------------------------


def test_all_padding_batch_gives_exactly_zero(rng):
    logits = rng.normal(size=(2, T, VOCAB)).astype("float32")
    zeros = np.zeros((2, T), "int32")
    assert _loss(zeros, logits) == 0.0
    assert oracle.masked_cross_entropy(zeros, logits) == 0.0
    # Real tokens, all weighted 0: nothing left to average either.
    labels = rng.integers(1, VOCAB, (2, T))
    assert _loss(labels, logits, np.zeros(2, "float32")) == 0.0
    assert float(np_(masked_acc(zeros, logits))) == 0.0
    assert oracle.masked_accuracy(zeros, logits) == 0.0


def test_all_padding_batch_has_exactly_zero_gradients(rng):
    model = _tagger()
    x = rng.integers(1, VOCAB, (2, T))
    y = np.zeros((2, T), "int32")
    loss, grads = variable_gradients(model, masked_loss, x, y)
    assert loss == 0.0
    assert len(grads) == len(model.trainable_variables) == 3
    for variable, grad in zip(model.trainable_variables, grads):
        # TensorFlow and torch report None for a variable the loss does not
        # reach; every variable here reaches the logits.
        assert grad is not None, variable.path
        assert np.all(np.isfinite(grad)), variable.path
        assert not np.any(grad), variable.path
    # Real tokens all weighted 0: the same.
    y = rng.integers(1, VOCAB, (2, T))
    loss, grads = variable_gradients(
        model,
        lambda t, p: masked_loss(t, p, sample_weight=np.zeros(2)),
        x,
        y,
    )
    assert loss == 0.0
    assert not any(np.any(g) for g in grads)


def test_fit_on_an_all_padding_batch_changes_no_weight(rng):
    model = _translator()
    model.compile(keras.optimizers.Adam(0.05), loss=masked_loss)
    x, y = _batch(rng)
    model(x)
    before = _weights(model)
    empty = np.zeros_like(y)
    history = model.fit(x, empty, batch_size=2, epochs=1, verbose=0)
    assert history.history["loss"] == [0.0]
    # Adam's first step with a zero gradient is exactly 0: weights and
    # moments unchanged, only the iteration counter moved.
    assert int(np_(model.optimizer.iterations)) == 1
    for a, b in zip(before, _weights(model)):
        np.testing.assert_array_equal(a, b)
    for variable in model.optimizer.variables:
        if "momentum" in variable.path or "velocity" in variable.path:
            assert not np.any(np_(variable.value)), variable.path
    # A normal batch next trains as usual: finite weights that moved.
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    after = _weights(model)
    assert all(np.all(np.isfinite(w)) for w in after)
    assert max(np.abs(a - b).max() for a, b in zip(before, after)) > 1e-3


# sample_weight -----------------------------------------------------------


def test_weight_zero_drops_an_example(rng):
    y = rng.integers(1, VOCAB, (2, T))
    y[0, 3:] = 0
    logits = rng.normal(size=(2, T, VOCAB)).astype("float32")
    alone = oracle.masked_cross_entropy(y[:1], logits[:1])
    got = _loss(y, logits, np.array([1.0, 0.0]))
    assert got == pytest.approx(alone, abs=TOL, rel=TOL)
    assert got == pytest.approx(_loss(y[:1], logits[:1]), abs=TOL, rel=TOL)
    # (batch, 1) as Keras may hand it over, and a Python list.
    assert _loss(y, logits, np.array([[1.0], [0.0]])) == got
    assert _loss(y, logits, [1.0, 0.0]) == got


def test_weight_two_counts_an_example_twice(rng):
    y = rng.integers(1, VOCAB, (2, T))
    y[1, 2:] = 0
    logits = rng.normal(size=(2, T, VOCAB)).astype("float32")
    twice = oracle.masked_cross_entropy(
        np.concatenate([y, y[1:]]), np.concatenate([logits, logits[1:]])
    )
    assert _loss(y, logits, np.array([1.0, 2.0])) == pytest.approx(
        twice, abs=TOL, rel=TOL
    )


def test_per_token_weights_match_oracle(rng):
    y = rng.integers(1, VOCAB, (3, T))
    y[2] = 0
    y[0, 2:] = 0
    logits = rng.normal(size=(3, T, VOCAB)).astype("float32")
    w = rng.uniform(0.0, 3.0, (3, T)).astype("float32")
    w[1, 0] = 0.0
    expected = oracle.masked_cross_entropy(y, logits, sample_weight=w)
    assert _loss(y, logits, w) == pytest.approx(expected, abs=TOL, rel=TOL)
    assert _loss(y, logits, w[..., None]) == pytest.approx(
        expected, abs=TOL, rel=TOL
    )


def test_mixed_batch_matches_oracle(rng):
    # Padded tails, one all-padding example, fractional and zero weights.
    y = rng.integers(1, VOCAB, (5, 6))
    y[0, 4:] = 0
    y[1] = 0
    y[3, 1:] = 0
    logits = (3.0 * rng.normal(size=(5, 6, VOCAB))).astype("float32")
    w = np.array([0.25, 4.0, 0.0, 1.5, 0.1], "float32")
    for weights in (None, w):
        expected = oracle.masked_cross_entropy(y, logits, sample_weight=weights)
        assert _loss(y, logits, weights) == pytest.approx(
            expected, abs=TOL, rel=TOL
        )
    # Fractional weights summing below 1 are not clamped to 1.
    small = np.array([0.0, 0.0, 0.0, 0.0, 0.1], "float32")
    assert _loss(y, logits, small) == pytest.approx(
        oracle.masked_cross_entropy(y[4:], logits[4:]), abs=TOL, rel=TOL
    )


def test_sample_weight_of_the_wrong_shape_is_a_clear_error(rng):
    y = rng.integers(1, VOCAB, (2, T))
    logits = rng.normal(size=(2, T, VOCAB)).astype("float32")
    message = (
        "masked_loss expects sample_weight of shape (batch,) (one weight per "
        "example) or (batch, t) (one per token) matching labels y_true "
        "(2, 4); got sample_weight (3,)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        masked_loss(y, logits, sample_weight=np.ones(3, "float32"))
    with pytest.raises(ValueError, match=re.escape("sample_weight (2, 5)")):
        masked_loss(y, logits, sample_weight=np.ones((2, 5), "float32"))


def _tagged(rng):
    x = rng.integers(1, VOCAB, (2, T))
    y = rng.integers(1, VOCAB, (2, T))
    y[0, 3:] = 0
    y[1, 1:] = 0
    return x, y


def test_sample_weight_through_evaluate_and_fit(rng):
    model = _tagger()
    model.compile(keras.optimizers.SGD(0.5), loss=masked_loss)
    x, y = _tagged(rng)
    w = np.array([1.0, 0.0], "float32")
    logits = np_(model.predict(x, verbose=0))
    alone = oracle.masked_cross_entropy(y[:1], logits[:1])
    loss = model.evaluate(x, y, sample_weight=w, batch_size=2, verbose=0)
    assert loss == pytest.approx(alone, abs=TOL, rel=TOL)
    per_token = np.array([[0.0, 1.0, 3.0, 0.0], [0.5, 2.0, 2.0, 2.0]])
    loss = model.evaluate(
        x, y, sample_weight=per_token, batch_size=2, verbose=0
    )
    expected = oracle.masked_cross_entropy(y, logits, sample_weight=per_token)
    assert loss == pytest.approx(expected, abs=TOL, rel=TOL)

    # One SGD step weighted [1, 0] is the step on example 0 alone.
    initial = model.get_weights()
    history = model.fit(x, y, sample_weight=w, batch_size=2, verbose=0)
    assert history.history["loss"][0] == pytest.approx(alone, abs=TOL, rel=TOL)
    weighted = _weights(model)
    model.set_weights(initial)
    model.fit(x[:1], y[:1], batch_size=1, verbose=0)
    moved = 0.0
    for a, b, c in zip(weighted, _weights(model), initial):
        # SGD(0.5) steps from float32 gradients summed in another order.
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)
        moved = max(moved, np.abs(a - c).max())
    assert moved > 1e-2


# dtypes, serialization ---------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_logits_give_a_float32_loss(rng, dtype):
    y = rng.integers(1, VOCAB, (2, T))
    y[0, 2:] = 0
    logits = keras.ops.cast(rng.normal(size=(2, T, VOCAB)), dtype)
    exact = np_(keras.ops.cast(logits, "float32"))
    loss = masked_loss(y, logits, sample_weight=np.array([1.0, 3.0]))
    assert keras.backend.standardize_dtype(loss.dtype) == "float32"
    expected = oracle.masked_cross_entropy(y, exact, sample_weight=[1, 3])
    assert float(np_(loss)) == pytest.approx(expected, abs=TOL, rel=TOL)
    empty = masked_loss(np.zeros_like(y), logits)
    assert keras.backend.standardize_dtype(empty.dtype) == "float32"
    assert float(np_(empty)) == 0.0


def test_compiled_model_saves_and_loads_with_the_loss(rng, tmp_path):
    model = _tagger()
    model.compile(keras.optimizers.Adam(0.01), loss=masked_loss)
    x, y = _tagged(rng)
    w = np.array([1.0, 0.0], "float32")
    model.fit(x, y, batch_size=2, verbose=0)
    path = str(tmp_path / "tagger.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.loss, MaskedLoss)
    assert loaded.loss.name == "masked_loss"
    assert model.evaluate(
        x, y, sample_weight=w, batch_size=2, verbose=0
    ) == loaded.evaluate(x, y, sample_weight=w, batch_size=2, verbose=0)


def test_config_round_trip_and_old_function_name():
    loss = MaskedLoss(name="tokens")
    again = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(again, MaskedLoss)
    assert again.get_config() == loss.get_config()
    assert masked_loss.__name__ == "masked_loss"
    # What `.keras` files stored when `masked_loss` was a function.
    old = {
        "module": "builtins",
        "class_name": "function",
        "config": "kmodels>masked_loss",
        "registered_name": "function",
    }
    assert keras.saving.deserialize_keras_object(old) is masked_loss
