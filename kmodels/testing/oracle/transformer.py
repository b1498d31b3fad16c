"""The post-norm Transformer encoder block of Vaswani et al. (2017)."""

import numpy as np

from kmodels.testing.oracle.attention import multi_head_attention
from kmodels.testing.oracle.dense import dense
from kmodels.testing.oracle.normalization import layer_norm


def _gelu(x):
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def transformer_encoder(
    x,
    attention_weights,
    attention_norm,
    ffn_inner,
    ffn_outer,
    ffn_norm,
    padding_mask=None,
    activation="relu",
    epsilon=1e-5,
    normalize_first=False,
):
    """One encoder block:

        post-norm:  a = LN(x + MHA(x, x));   y = LN(a + FFN(a))
        pre-norm:   a = x + MHA(LN(x));      y = a + FFN(LN(a))
        FFN(a) = act(a W1 + b1) W2 + b2

    Args:
        x: `(batch, seq, dim)`.
        attention_weights: the 8 MHA arrays (see `multi_head_attention`).
        attention_norm: `(gamma, beta)` of the attention LayerNorm.
        ffn_inner: `(kernel, bias)` of the first FFN Dense.
        ffn_outer: `(kernel, bias)` of the second FFN Dense.
        ffn_norm: `(gamma, beta)` of the FFN LayerNorm.
        padding_mask: optional boolean `(batch, seq)`; padded keys are not
            attended to.
        activation: "relu" or "gelu".
        epsilon: LayerNorm epsilon.
        normalize_first: pre-norm instead of post-norm.
    """
    x = np.asarray(x, np.float64)

    def act(v):
        return np.maximum(v, 0.0) if activation == "relu" else _gelu(v)

    def attend(v):
        out, _ = multi_head_attention(
            v,
            v,
            attention_weights,
            query_mask=padding_mask,
            value_mask=padding_mask,
        )
        return out

    def ffn(v):
        return dense(act(dense(v, *ffn_inner)), *ffn_outer)

    if normalize_first:
        a = x + attend(layer_norm(x, *attention_norm, epsilon=epsilon))
        return a + ffn(layer_norm(a, *ffn_norm, epsilon=epsilon))
    a = layer_norm(x + attend(x), *attention_norm, epsilon=epsilon)
    return layer_norm(a + ffn(a), *ffn_norm, epsilon=epsilon)
