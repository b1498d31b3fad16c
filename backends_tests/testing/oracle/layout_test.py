"""The parity suite must catch layout mistakes: a swapped gate order, a
transposed kernel or swapped biases give a mismatch far outside tolerance.

Each test first checks the correct layout matches (so the mismatch is due to
the perturbation alone), then perturbs the oracle's weights."""

import keras
import numpy as np

from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy

TOLERANCE = 1e-5  # the suite's stated relative tolerance
MISMATCH = 1e-2  # a perturbed layout must differ by at least this much


def _max_rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _gru(rng, randomize):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    layer = keras.layers.GRU(4, return_sequences=True)
    layer.build(x.shape)
    w = randomize(layer)
    return x, np_(layer(x)), w


def _swap_blocks(m, i, j, units):
    m = m.copy()
    bi = m[..., i * units : (i + 1) * units].copy()
    m[..., i * units : (i + 1) * units] = m[..., j * units : (j + 1) * units]
    m[..., j * units : (j + 1) * units] = bi
    return m


def test_gru_correct_layout_matches(rng, randomize):
    x, out, (k, rk, b) = _gru(rng, randomize)
    assert _max_rel(out, oracle.gru(x, k, rk, b)[0]) < TOLERANCE


def test_gru_swapped_update_and_reset_gates_mismatch(rng, randomize):
    x, out, (k, rk, b) = _gru(rng, randomize)
    swapped = [_swap_blocks(m, 0, 1, 4) for m in (k, rk, b)]
    assert _max_rel(out, oracle.gru(x, *swapped)[0]) > MISMATCH


def test_gru_swapped_reset_and_candidate_gates_mismatch(rng, randomize):
    x, out, (k, rk, b) = _gru(rng, randomize)
    swapped = [_swap_blocks(m, 1, 2, 4) for m in (k, rk, b)]
    assert _max_rel(out, oracle.gru(x, *swapped)[0]) > MISMATCH


def test_gru_transposed_recurrent_block_mismatch(rng, randomize):
    x, out, (k, rk, b) = _gru(rng, randomize)
    rk_t = np.concatenate(
        [rk[:, i * 4 : (i + 1) * 4].T for i in range(3)], axis=1
    )
    assert _max_rel(out, oracle.gru(x, k, rk_t, b)[0]) > MISMATCH


def test_gru_swapped_input_and_recurrent_bias_mismatch(rng, randomize):
    x, out, (k, rk, b) = _gru(rng, randomize)
    assert _max_rel(out, oracle.gru(x, k, rk, b[::-1])[0]) > MISMATCH


def test_attention_transposed_query_kernel_mismatch(rng, randomize):
    q = rng.normal(size=(2, 3, 4)).astype("float32")
    v = rng.normal(size=(2, 5, 4)).astype("float32")
    mha = keras.layers.MultiHeadAttention(num_heads=1, key_dim=4)
    mha.build(q.shape, v.shape)
    w = randomize(mha)
    out = np_(mha(q, v))
    assert _max_rel(out, oracle.multi_head_attention(q, v, w)[0]) < TOLERANCE
    w_t = list(w)
    w_t[0] = np.transpose(w[0], (2, 1, 0))
    assert _max_rel(out, oracle.multi_head_attention(q, v, w_t)[0]) > MISMATCH


def test_dense_transposed_kernel_mismatch(rng, randomize):
    x = rng.normal(size=(3, 4)).astype("float32")
    layer = keras.layers.Dense(4)
    layer.build(x.shape)
    k, b = randomize(layer)
    out = np_(layer(x))
    assert _max_rel(out, oracle.dense(x, k, b)) < TOLERANCE
    assert _max_rel(out, oracle.dense(x, k.T, b)) > MISMATCH
