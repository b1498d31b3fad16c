"""MultiHeadAttention (+ Add + LayerNormalization, the tutorial's
CrossAttention block) against the NumPy oracle."""

import keras
import numpy as np

from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy

# float32 vs float64 through three matmuls and a softmax: measured ~1e-7.
RTOL, ATOL = 1e-5, 1e-6


def _inputs(rng, batch=2, t=5, s=6, units=8):
    query = rng.normal(size=(batch, t, units)).astype("float32")
    value = rng.normal(size=(batch, s, units)).astype("float32")
    value_mask = np.arange(s)[None, :] < np.array([[6], [3]])
    return query, value, value_mask


def test_one_head_attention_with_value_mask(rng, randomize, parity):
    query, value, value_mask = _inputs(rng)
    mha = keras.layers.MultiHeadAttention(num_heads=1, key_dim=8)
    mha.build(query.shape, value.shape)
    w = randomize(mha)
    out, scores = mha(
        query, value, value_mask=value_mask, return_attention_scores=True
    )
    ref_out, ref_scores = oracle.multi_head_attention(
        query, value, w, value_mask=value_mask
    )
    np.testing.assert_allclose(np_(out), ref_out, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np_(scores), ref_scores, rtol=RTOL, atol=ATOL)
    # Padded context positions get exactly zero weight.
    assert np.all(np_(scores)[1, :, :, 3:] == 0.0)
    parity.record("oracle/mha_scores", scores, atol=ATOL, rtol=RTOL)


def test_two_heads_causal(rng, randomize):
    query, _, _ = _inputs(rng)
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    mha.build(query.shape, query.shape)
    w = randomize(mha)
    out = mha(query, query, use_causal_mask=True)
    ref, _ = oracle.multi_head_attention(query, query, w, use_causal_mask=True)
    np.testing.assert_allclose(np_(out), ref, rtol=RTOL, atol=ATOL)


def test_attention_add_layer_norm_block(rng, randomize, parity):
    # The tutorial's CrossAttention: LN(x + MHA(x, context)).
    query, value, value_mask = _inputs(rng)
    mha = keras.layers.MultiHeadAttention(num_heads=1, key_dim=8)
    norm = keras.layers.LayerNormalization()
    mha.build(query.shape, value.shape)
    norm.build(query.shape)
    w = randomize(mha)
    gamma, beta = randomize(norm)
    attended = mha(query, value, value_mask=value_mask)
    out = norm(keras.layers.Add()([query, attended]))
    ref_att, _ = oracle.multi_head_attention(
        query, value, w, value_mask=value_mask
    )
    ref = oracle.layer_norm(query + ref_att, gamma, beta, epsilon=1e-3)
    np.testing.assert_allclose(np_(out), ref, rtol=RTOL, atol=ATOL)
    parity.record("oracle/cross_attention_block", out, atol=ATOL, rtol=RTOL)
