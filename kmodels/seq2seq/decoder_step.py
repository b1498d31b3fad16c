"""One step of a `Decoder` in `keras.ops`, with the context's keys and
values computed once, for loops that call the decoder at every step.

`Decoder.__call__` on one token runs `MultiHeadAttention` in its own
layout: its key and value projections are `(rows, s, 1, units)`, and its
attention products want them as `(rows, units, s)`. XLA hoists the
projections of a loop-invariant context out of a compiled loop, but not
those layout changes: at each step of a 4-beam search of the benchmark's
sizes (256 rows, 20 context positions, 256 units) two 5 MB copies. Here
the keys are laid out `(batch, units, s)` and the values `(batch, s,
units)` before the loop, on the context as the encoder returned it (one
row per input): the `group` rows that read the same context row (the
beams of a search) attend to it together, as queries `(batch, group,
units)`, so that the context is never repeated.

The arithmetic is the decoder's (torch's native loops do the same in torch
operations, `kmodels.backend.torch.decoding.decoder_step`): the GRU with
`reset_after` (a padding token carries the state over and outputs zeros,
as the decoder's masked GRU), the attention query scaled by
`1 / sqrt(key_dim)` after its projection, masked context positions at
Keras' large negative score (-1e9, or -3e4 in float16), the output
projection, the residual and `LayerNormalization` (computed in float32, as
Keras does), then the output layer; every product in the compute dtype.
"""

import math

from keras import ops

# Keras' `Softmax` writes this score at masked positions (-3e4 in float16).
_LARGE_NEGATIVE = -1e9
_LARGE_NEGATIVE_FLOAT16 = -3e4


def supports(decoder):
    """True when `decoder` (a `Decoder`) is built and the configuration
    `decoder_step` implements: the one `Decoder` builds (a GRU with a bias,
    `reset_after`, tanh and sigmoid; one attention head with biases, the
    value size the key size; a centred and scaled `LayerNormalization` over
    the last axis)."""
    cell = decoder.rnn.cell
    mha = decoder.attention.mha.get_config()
    norm = decoder.attention.layernorm
    axis = norm.axis if isinstance(norm.axis, (list, tuple)) else [norm.axis]
    return (
        decoder.built
        and cell.reset_after
        and cell.use_bias
        and getattr(cell.activation, "__name__", "") == "tanh"
        and getattr(cell.recurrent_activation, "__name__", "") == "sigmoid"
        and mha["num_heads"] == 1
        and mha["use_bias"]
        and mha["value_dim"] in (None, mha["key_dim"])
        and mha["output_shape"] is None
        and mha["attention_axes"] in (None, (1,), [1])
        and not mha.get("use_gate", False)
        and mha.get("sliding_window") is None
        and not norm.rms_scaling
        and norm.center
        and norm.scale
        and list(axis) in ([-1], [2])
    )


def decoder_step(decoder, context, context_mask, group=1):
    """The step function of `decoder` over an encoded `context`, or None
    when `decoder` is not the configuration it implements (`supports`):
    call `decoder` itself then. Traceable (pure `keras.ops`); call it
    outside the loop, so that the keys and values are computed once.

    Args:
        decoder: a built `kmodels.seq2seq.Decoder`.
        context: float `(batch, s, units)`, the encoder's output.
        context_mask: bool `(batch, s)`, True at real context positions.
        group: int >= 1. Rows per context row: the step's rows are
            `batch * group`, rows `b * group` to `b * group + group - 1`
            attending to context row `b` (the order of
            `ops.repeat(context, group, axis=0)`).

    Returns:
        `step(token, state) -> (logits, state, weights)`: from int `(rows,)`
        ids and the `(rows, units)` GRU state, the `(rows, vocabulary)`
        logits, the new state and the `(rows, s)` attention weights, in the
        compute dtype: what `decoder(ops.repeat(context, group, axis=0),
        token[:, None], state=state, return_state=True, context_mask=...,
        return_attention_weights=True)` returns, without its length-1 time
        axis.

    Example:

    >>> import numpy as np
    >>> from kmodels.seq2seq import Translator
    >>> from kmodels.seq2seq.masking import padding_mask
    >>> model = Translator(20, 9, 8, start_id=2, end_id=3)
    >>> tokens = np.array([[4, 5, 6, 0]], "int32")
    >>> model.build((tokens.shape, (1, 1)))
    >>> step = decoder_step(
    ...     model.decoder, model.encoder(tokens), padding_mask(tokens), 3)
    >>> logits, state, weights = step(
    ...     np.array([2, 2, 2], "int32"), np.zeros((3, 8), "float32"))
    >>> tuple(logits.shape), tuple(state.shape), tuple(weights.shape)
    ((3, 9), (3, 8), (3, 4))
    """
    if not supports(decoder):
        return None
    dtype = decoder.compute_dtype
    cell = decoder.rnn.cell
    mha = decoder.attention.mha
    norm = decoder.attention.layernorm

    def value(variable):
        return ops.cast(variable, dtype)

    embeddings = value(decoder.embedding.embeddings)
    kernel = value(cell.kernel)
    recurrent_kernel = value(cell.recurrent_kernel)
    bias = value(cell.bias)
    input_bias, recurrent_bias = bias[0], bias[1]
    # MultiHeadAttention's kernels: query, key and value (units, 1,
    # key_dim), output (1, key_dim, units).
    wq = value(mha.query_dense.kernel)[:, 0]
    bq = value(mha.query_dense.bias)[0]
    wo = value(mha.output_dense.kernel)[0]
    bo = value(mha.output_dense.bias)
    key_dim = mha.get_config()["key_dim"]
    scale = ops.cast(1.0 / math.sqrt(float(key_dim)), dtype)
    out_kernel = value(decoder.output_layer.kernel)
    out_bias = value(decoder.output_layer.bias)
    context = ops.cast(context, dtype)
    # The context's keys and values do not change between steps: computed
    # once, the keys in the layout of the score product.
    keys = ops.matmul(context, value(mha.key_dense.kernel)[:, 0])
    keys = ops.transpose(keys + value(mha.key_dense.bias)[0], (0, 2, 1))
    values = ops.matmul(context, value(mha.value_dense.kernel)[:, 0])
    values = values + value(mha.value_dense.bias)[0]
    visible = ops.cast(context_mask, "bool")[:, None, :]
    negative = (
        _LARGE_NEGATIVE_FLOAT16 if dtype == "float16" else _LARGE_NEGATIVE
    )

    def step(token, state):
        token = ops.cast(token, "int32")
        state = ops.cast(state, dtype)
        x = ops.take(embeddings, token, axis=0)
        xz, xr, xh = ops.split(ops.matmul(x, kernel) + input_bias, 3, -1)
        hz, hr, hh = ops.split(
            ops.matmul(state, recurrent_kernel) + recurrent_bias, 3, -1
        )
        z = ops.sigmoid(xz + hz)
        r = ops.sigmoid(xr + hr)
        n = ops.tanh(xh + r * hh)
        # A padding token is a masked step: the state is carried over and
        # the GRU's output is zeros.
        real = (token != 0)[:, None]
        state = ops.where(real, n + z * (state - n), state)
        h = ops.where(real, state, ops.zeros_like(state))
        query = (ops.matmul(h, wq) + bq) * scale
        query = ops.reshape(query, (-1, group, key_dim))
        scores = ops.where(visible, ops.matmul(query, keys), negative)
        weights = ops.softmax(scores, axis=-1)
        attended = ops.reshape(ops.matmul(weights, values), (-1, key_dim))
        attended = ops.matmul(attended, wo) + bo
        y = ops.layer_normalization(
            h + attended,
            norm.gamma,
            norm.beta,
            axis=-1,
            epsilon=norm.epsilon,
        )
        y = ops.cast(y, dtype)
        logits = ops.matmul(y, out_kernel) + out_bias
        weights = ops.reshape(weights, (-1, ops.shape(weights)[-1]))
        return logits, state, weights

    return step
