"""Keras' GRU and Bidirectional(GRU) against the NumPy oracle."""

import keras
import numpy as np

from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy

# float32 Keras vs float64 oracle over 7 recurrent steps: measured error is
# ~1e-7; 1e-5 relative (with 1e-6 absolute for values near zero) is the
# foundation's stated bound.
RTOL, ATOL = 1e-5, 1e-6


def _inputs(rng, batch=3, time=7, features=5):
    x = rng.normal(size=(batch, time, features)).astype("float32")
    # Right padding of different lengths, one full row.
    lengths = np.array([7, 4, 1])
    mask = np.arange(time)[None, :] < lengths[:, None]
    return x, mask


def test_gru_without_mask(rng, randomize, parity):
    x, _ = _inputs(rng)
    layer = keras.layers.GRU(4, return_sequences=True, return_state=True)
    layer.build(x.shape)
    w = randomize(layer)
    seq, state = map(np_, layer(x))
    ref_seq, ref_state = oracle.gru(x, *w)
    np.testing.assert_allclose(seq, ref_seq, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(state, ref_state, rtol=RTOL, atol=ATOL)
    parity.record("oracle/gru", seq, atol=ATOL, rtol=RTOL)


def test_gru_with_mask_keeps_state_through_padding(rng, randomize, parity):
    x, mask = _inputs(rng)
    layer = keras.layers.GRU(4, return_sequences=True, return_state=True)
    layer.build(x.shape)
    w = randomize(layer)
    seq, state = map(np_, layer(x, mask=mask))
    ref_seq, ref_state = oracle.gru(x, *w, mask=mask)
    np.testing.assert_allclose(state, ref_state, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(seq[mask], ref_seq[mask], rtol=RTOL, atol=ATOL)
    # The final state of a padded row is its state at its last real step.
    np.testing.assert_allclose(state[1], ref_seq[1, 3], rtol=RTOL, atol=ATOL)
    parity.record("oracle/gru_masked_state", state, atol=ATOL, rtol=RTOL)


def test_gru_initial_state(rng, randomize):
    x, _ = _inputs(rng)
    h0 = rng.normal(size=(3, 4)).astype("float32")
    layer = keras.layers.GRU(4, return_sequences=True, return_state=True)
    layer.build(x.shape)
    w = randomize(layer)
    seq, state = map(np_, layer(x, initial_state=h0))
    ref_seq, ref_state = oracle.gru(x, *w, initial_state=h0)
    np.testing.assert_allclose(seq, ref_seq, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(state, ref_state, rtol=RTOL, atol=ATOL)


def test_bidirectional_sum_with_mask(rng, randomize, parity):
    x, mask = _inputs(rng)
    layer = keras.layers.Bidirectional(
        keras.layers.GRU(4, return_sequences=True), merge_mode="sum"
    )
    layer.build(x.shape)
    w = randomize(layer)
    seq = np_(layer(x, mask=mask))
    ref_seq, _, _ = oracle.bidirectional_gru(
        x, tuple(w[:3]), tuple(w[3:]), mask=mask, merge_mode="sum"
    )
    np.testing.assert_allclose(seq[mask], ref_seq[mask], rtol=RTOL, atol=ATOL)
    parity.record(
        "oracle/bigru_sum_masked",
        np.where(mask[..., None], seq, 0),
        atol=ATOL,
        rtol=RTOL,
    )


def test_bidirectional_sum_without_mask(rng, randomize):
    x, _ = _inputs(rng)
    layer = keras.layers.Bidirectional(
        keras.layers.GRU(4, return_sequences=True), merge_mode="sum"
    )
    layer.build(x.shape)
    w = randomize(layer)
    ref_seq, _, _ = oracle.bidirectional_gru(x, tuple(w[:3]), tuple(w[3:]))
    np.testing.assert_allclose(np_(layer(x)), ref_seq, rtol=RTOL, atol=ATOL)
