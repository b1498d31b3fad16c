"""Scaled dot-product multi-head attention (Vaswani et al., 2017)."""

import numpy as np

# A masked logit; large enough that exp() underflows to exactly zero in
# float32 next to any real logit.
_MASKED = -1e9


def softmax(x, axis=-1):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def multi_head_attention(
    query,
    value,
    weights,
    key=None,
    query_mask=None,
    value_mask=None,
    attention_mask=None,
    use_causal_mask=False,
):
    """Multi-head attention; returns `(output, scores)`.

        Q_h = query W^Q_h + b^Q_h,  K_h = key W^K_h + b^K_h,
        V_h = value W^V_h + b^V_h
        A_h = softmax(Q_h K_h^T / sqrt(d_k))   (masked logits excluded)
        out = sum_h (A_h V_h) W^O_h + b^O

    Args:
        query: `(batch, t, dim_q)`.
        value: `(batch, s, dim_v)`; `key` defaults to `value`.
        weights: the 8 arrays of Keras' `MultiHeadAttention.get_weights()`
            order: query kernel `(dim_q, heads, d_k)` and bias `(heads, d_k)`,
            key kernel and bias, value kernel `(dim_v, heads, d_v)` and bias,
            output kernel `(heads, d_v, dim_out)` and bias `(dim_out,)`.
        query_mask: optional boolean `(batch, t)`.
        value_mask: optional boolean `(batch, s)`.
        attention_mask: optional boolean `(batch, t, s)`, combined (and) with
            the masks above.
        use_causal_mask: also forbid attending to later positions.

    Returns:
        `output (batch, t, dim_out)` and `scores (batch, heads, t, s)`.
    """
    key = value if key is None else key
    wq, bq, wk, bk, wv, bv, wo, bo = (
        np.asarray(w, np.float64) for w in weights
    )
    q = np.einsum("btd,dhk->bhtk", query, wq) + bq[None, :, None, :]
    k = np.einsum("bsd,dhk->bhsk", key, wk) + bk[None, :, None, :]
    v = np.einsum("bsd,dhk->bhsk", value, wv) + bv[None, :, None, :]
    logits = np.einsum("bhtk,bhsk->bhts", q, k) / np.sqrt(q.shape[-1])
    batch, t, s = query.shape[0], query.shape[1], value.shape[1]
    allowed = np.ones((batch, t, s), bool)
    if query_mask is not None:
        allowed &= np.asarray(query_mask, bool)[:, :, None]
    if value_mask is not None:
        allowed &= np.asarray(value_mask, bool)[:, None, :]
    if attention_mask is not None:
        allowed &= np.asarray(attention_mask, bool)
    if use_causal_mask:
        allowed &= np.tril(np.ones((t, s), bool))[None]
    logits = np.where(allowed[:, None], logits, _MASKED)
    scores = softmax(logits, axis=-1)
    heads = np.einsum("bhts,bhsk->bhtk", scores, v)
    out = np.einsum("bhtk,hkd->btd", heads, wo) + bo
    return out, scores
