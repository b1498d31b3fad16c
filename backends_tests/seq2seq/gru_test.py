"""`run_grus` against Keras' own masked GRU layers on the same variables:
outputs, final states and gradients, with right, left and full padding."""

import keras
import numpy as np
import pytest
from keras import ops

from kmodels.seq2seq.gru import check_fast_gru
from kmodels.seq2seq.gru import run_grus
from kmodels.testing.gradients import loss_gradients
from kmodels.testing.oracle.gradients import numerical_gradient
from kmodels.testing.oracle.gru import gru as oracle_gru

np_ = keras.ops.convert_to_numpy

# Both sides are float32 over 6 steps with O(1) values: measured
# differences <= 2e-7; 1e-5 is the bound.
TOL = 1e-5
BATCH, STEPS, FEATURES, UNITS = 4, 6, 5, 3


def _inputs(rng):
    x = rng.standard_normal((BATCH, STEPS, FEATURES)).astype("float32")
    mask = np.ones((BATCH, STEPS), bool)
    mask[1, 4:] = False  # right padding
    mask[2, :2] = False  # left padding
    mask[3, :] = False  # all padding
    return x, mask


def _randomize(layer, rng):
    for v in layer.weights:
        v.assign(rng.uniform(-0.8, 0.8, tuple(v.shape)).astype("float32"))


def test_bidirectional_matches_keras_outputs_and_gradients(rng):
    x, mask = _inputs(rng)
    bi = keras.layers.Bidirectional(
        keras.layers.GRU(UNITS, return_sequences=True), merge_mode="sum"
    )
    bi.build((BATCH, STEPS, FEATURES))
    _randomize(bi, rng)
    layers = (bi.forward_layer, bi.backward_layer)
    # A tensor: torch * ndarray would go through NumPy (and fail on grads).
    weight = ops.convert_to_tensor(
        rng.standard_normal((BATCH, STEPS, UNITS)).astype("float32")
    )

    def fast():
        zeros = ops.zeros((BATCH, UNITS))
        x_ = ops.convert_to_tensor(x)
        (f, b), _ = run_grus(
            layers,
            (x_, x_),
            (mask, mask),
            (zeros, zeros),
            (False, True),
            (True, True),
        )
        return f + b

    def plain():
        return bi(x, mask=mask)

    np.testing.assert_allclose(np_(fast()), np_(plain()), atol=TOL)
    # Zero context at every padded position, all-padding row included.
    assert np.all(np_(fast())[~mask] == 0.0)
    _, fast_grads = loss_gradients(bi, lambda: ops.sum(fast() * weight))
    _, plain_grads = loss_gradients(bi, lambda: ops.sum(plain() * weight))
    assert len(fast_grads) == 6
    for a, b in zip(fast_grads, plain_grads):
        np.testing.assert_allclose(a, b, atol=TOL)


def test_gru_with_state_matches_keras_outputs_state_and_gradients(rng):
    x, mask = _inputs(rng)
    gru = keras.layers.GRU(UNITS, return_sequences=True, return_state=True)
    gru.build((BATCH, STEPS, FEATURES))
    _randomize(gru, rng)
    # A tensor: torch * ndarray would go through NumPy (and fail on grads).
    weight = ops.convert_to_tensor(
        rng.standard_normal((BATCH, STEPS, UNITS)).astype("float32")
    )
    state = rng.standard_normal((BATCH, UNITS)).astype("float32")
    zeros = np.zeros_like(state)

    def fast(h0):
        (seq,), (h,) = run_grus(
            (gru,),
            (ops.convert_to_tensor(x),),
            (mask,),
            (h0,),
            (False,),
            (False,),
        )
        return seq, h

    # The final state is the initial one for the all-padding row.
    _, h = fast(state)
    np.testing.assert_allclose(
        np_(h), np_(gru(x, state, mask=mask)[1]), atol=TOL
    )
    np.testing.assert_allclose(np_(h)[3], state[3], atol=0)
    # Outputs from a zero state (Keras' JAX loop repeats a nonzero
    # initial state at leading padded steps where TF and torch give 0;
    # `run_grus` gives 0, the last real output, on every backend).
    seq, h = fast(zeros)
    ref_seq, ref_h = gru(x, zeros, mask=mask)
    np.testing.assert_allclose(np_(seq), np_(ref_seq), atol=TOL)
    np.testing.assert_allclose(np_(h), np_(ref_h), atol=TOL)
    # A padded step repeats the last real output; zeros before any.
    np.testing.assert_array_equal(
        np_(seq)[1, 4:], np_(seq)[1, 3:4].repeat(2, 0)
    )
    assert np.all(np_(seq)[2, :2] == 0.0) and np.all(np_(seq)[3] == 0.0)

    def loss(fn):
        seq, h = fn()
        return ops.sum(seq * weight) + ops.sum(h)

    _, fast_grads = loss_gradients(gru, lambda: loss(lambda: fast(zeros)))
    _, plain_grads = loss_gradients(
        gru, lambda: loss(lambda: gru(x, zeros, mask=mask))
    )
    for a, b in zip(fast_grads, plain_grads):
        np.testing.assert_allclose(a, b, atol=TOL)


def test_other_gru_configurations_keep_the_keras_layer():
    assert not check_fast_gru(keras.layers.GRU(3, reset_after=False))
    assert not check_fast_gru(keras.layers.GRU(3, dropout=0.1))
    assert not check_fast_gru(keras.layers.GRU(3, activation="relu"))


class _Inputs(keras.layers.Layer):
    """Holds `x` and the initial states as variables, so that
    `loss_gradients` differentiates them along with the GRUs' weights."""

    def __init__(self, grus, x, states):
        super().__init__()
        self.grus = grus
        self.x = self.add_weight(
            shape=x.shape, initializer=keras.initializers.Constant(x)
        )
        self.states = [
            self.add_weight(
                shape=s.shape, initializer=keras.initializers.Constant(s)
            )
            for s in states
        ]


@pytest.mark.parametrize("zero_output", [True, False])
def test_gradients_match_finite_differences_of_the_numpy_oracle(
    rng, zero_output
):
    # The hand-written backward pass of `run_grus` against central
    # differences of `kmodels.testing.oracle.gru` in float64: inputs,
    # initial states, kernels and biases of a forward and a backward GRU,
    # with right, left and full padding. float32 against float64 over 6
    # steps: measured differences < 1e-5; the bound is 1e-4.
    batch, steps, features, units = 4, 6, 2, 2
    x, mask = _inputs(rng)
    x = x[..., :features]
    grus = []
    for _ in range(2):
        gru = keras.layers.GRU(units, return_sequences=True)
        gru.build((batch, steps, features))
        _randomize(gru, rng)
        grus.append(gru)
    states = [rng.uniform(-1, 1, (batch, units)).astype("float32")] * 2
    holder = _Inputs(grus, x, states)
    w_out = [rng.standard_normal((batch, steps, units)) for _ in range(2)]
    w_final = [rng.standard_normal((batch, units)) for _ in range(2)]

    def loss():
        x_ = ops.convert_to_tensor(holder.x)
        outputs, finals = run_grus(
            grus,
            (x_, x_),
            (mask, mask),
            [ops.convert_to_tensor(s) for s in holder.states],
            (False, True),
            (zero_output, zero_output),
        )
        total = 0.0
        for out, final, w, v in zip(outputs, finals, w_out, w_final):
            total = total + ops.sum(out * ops.convert_to_tensor(w, "float32"))
            total = total + ops.sum(final * ops.convert_to_tensor(v, "float32"))
        return total

    def oracle_loss(params):
        x_, s_f, s_b = params[:3]
        total = 0.0
        for g, (backwards, s) in enumerate(((False, s_f), (True, s_b))):
            kernel, recurrent, bias = params[3 + 3 * g : 6 + 3 * g]
            seq, h = oracle_gru(
                x_,
                kernel,
                recurrent,
                bias,
                mask=mask,
                initial_state=s,
                go_backwards=backwards,
                zero_output_for_mask=zero_output,
            )
            if backwards:
                seq = seq[:, ::-1]
            total += np.sum(seq * w_out[g]) + np.sum(h * w_final[g])
        return total

    _, grads = loss_gradients(holder, loss)
    # `holder.trainable_variables`: its own (x, states), then the GRUs'.
    params = [np_(v) for v in holder.trainable_variables]
    expected = numerical_gradient(oracle_loss, params)
    assert len(grads) == len(expected) == 9
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_bfloat16_inputs_run_and_match_the_float32_oracle(rng):
    # Under `mixed_bfloat16` the GRUs receive bfloat16 inputs and states
    # with float32 variables (torch's CPU loop upcasts to float32 inside,
    # see kmodels/backend/torch/rnn.py). Outputs come back in bfloat16 and
    # within bfloat16 rounding of the float32 oracle: 8 mantissa bits on
    # O(1) values over 6 steps, measured differences <= 9.4e-3 (5 seeds,
    # 3 backends); the bound is 3e-2. The gradients reach the float32
    # variables as float32.
    x, mask = _inputs(rng)
    gru = keras.layers.GRU(UNITS, return_sequences=True)
    gru.build((BATCH, STEPS, FEATURES))
    _randomize(gru, rng)
    x16 = ops.cast(ops.convert_to_tensor(x), "bfloat16")
    zeros = ops.zeros((BATCH, UNITS), "bfloat16")

    def fast():
        (seq,), (h,) = run_grus(
            (gru,), (x16,), (mask,), (zeros,), (False,), (True,)
        )
        return seq, h

    seq, h = fast()
    assert keras.backend.standardize_dtype(seq.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(h.dtype) == "bfloat16"
    kernel, recurrent, bias = (np_(v) for v in gru.weights)
    want_seq, want_h = oracle_gru(
        np_(ops.cast(x16, "float32")).astype("float64"),
        kernel,
        recurrent,
        bias,
        mask=mask,
        zero_output_for_mask=True,
    )
    got_seq = np_(ops.cast(seq, "float32"))
    np.testing.assert_allclose(got_seq, want_seq, atol=3e-2)
    np.testing.assert_allclose(np_(ops.cast(h, "float32")), want_h, atol=3e-2)
    assert np.all(got_seq[~mask] == 0.0)
    _, grads = loss_gradients(
        gru, lambda: ops.sum(ops.cast(fast()[0], "float32"))
    )
    assert [str(g.dtype) for g in grads] == ["float32"] * 3
    assert all(np.all(np.isfinite(g)) and np.any(g != 0) for g in grads)


class _TwoInputs(keras.layers.Layer):
    """`_Inputs` with two input sequences."""

    def __init__(self, grus, xs):
        super().__init__()
        self.grus = grus
        self.xs = [
            self.add_weight(
                shape=x.shape, initializer=keras.initializers.Constant(x)
            )
            for x in xs
        ]


def test_inputs_of_different_lengths_match_the_numpy_oracle(rng):
    # The translator's loop: a forward and a backward GRU over a 6-step
    # input and a third GRU over another, 4-step input (its loop runs 2
    # steps more, state carried over; torch projects each group into one
    # buffer inside its recurrence). The outputs' weighted sum against
    # `kmodels.testing.oracle.gru` (float32 against float64, bound 1e-5)
    # and gradients of every input and weight against
    # the oracle's central differences (bound 1e-4, as above).
    batch, features, units = 4, 2, 2
    long_x, long_mask = _inputs(rng)
    long_x = long_x[..., :features]
    short_x = rng.standard_normal((batch, 4, features)).astype("float32")
    short_mask = np.ones((batch, 4), bool)
    short_mask[0, 3:] = False
    short_mask[2, :1] = False
    grus = []
    for _ in range(3):
        gru = keras.layers.GRU(units, return_sequences=True)
        gru.build((batch, None, features))
        _randomize(gru, rng)
        grus.append(gru)
    holder = _TwoInputs(grus, (long_x, short_x))
    masks = (long_mask, long_mask, short_mask)
    backwards = (False, True, False)
    lengths = (STEPS, STEPS, 4)
    w_out = [rng.standard_normal((batch, n, units)) for n in lengths]
    w_final = [rng.standard_normal((batch, units)) for _ in range(3)]

    def run():
        long_, short_ = (ops.convert_to_tensor(x) for x in holder.xs)
        zeros = ops.zeros((batch, units))
        return run_grus(
            grus,
            (long_, long_, short_),
            masks,
            (zeros,) * 3,
            backwards,
            (True,) * 3,
        )

    def loss():
        outputs, finals = run()
        total = 0.0
        for out, final, w, v in zip(outputs, finals, w_out, w_final):
            total = total + ops.sum(out * ops.convert_to_tensor(w, "float32"))
            total = total + ops.sum(final * ops.convert_to_tensor(v, "float32"))
        return total

    def oracle(params):
        outputs = []
        for g in range(3):
            kernel, recurrent, bias = params[2 + 3 * g : 5 + 3 * g]
            seq, h = oracle_gru(
                params[0 if g < 2 else 1],
                kernel,
                recurrent,
                bias,
                mask=masks[g],
                go_backwards=backwards[g],
                zero_output_for_mask=True,
            )
            outputs.append((seq[:, ::-1] if backwards[g] else seq, h))
        return outputs

    def oracle_loss(params):
        return sum(
            np.sum(seq * w_out[g]) + np.sum(h * w_final[g])
            for g, (seq, h) in enumerate(oracle(params))
        )

    params = [np_(v) for v in holder.trainable_variables]
    value, grads = loss_gradients(holder, loss)
    # The outputs through their weighted sum (one run: JAX compiles each).
    np.testing.assert_allclose(float(value), oracle_loss(params), atol=TOL)
    expected = numerical_gradient(oracle_loss, params)
    assert len(grads) == len(expected) == 11
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, atol=1e-4)
