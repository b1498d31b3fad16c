"""The output projection and `MaskedLoss` fused, on real positions only.

`fused_masked_loss(features, kernel, bias, y_true)` is
`MaskedLoss()(y_true, features @ kernel + bias)` (the same value and the
same gradients with respect to `features`, `kernel` and `bias`) without
projecting the padded positions to the vocabulary and without the
`(positions, vocabulary)` logits of the whole batch: the real positions
(label != 0) are moved first (a sort of the mask, so every shape stays
static for a compiled step), and a loop over chunks of `chunk_size` of them
runs only as many chunks as the batch has real positions, as fused linear
cross-entropy kernels do. Each chunk computes its logits, their
log-sum-exp, its share of the loss and, in the same pass, its share of the
gradients (the loss is a scalar: its gradient is known up to the upstream
factor, applied in the backward pass), so no logits are kept or computed
again for the backward pass (`kmodels.backend.rnn.custom_gradient`). On
torch, which runs eagerly, the real positions are gathered
(`kmodels.backend.losses.real_positions`) and projected in one product
fused with the cross-entropy (`projected_cross_entropy` of
`kmodels.backend.losses`: one logits-sized tensor, forward and backward).

`Translator` trains with it (`fused_loss`); see docs/seq2seq.md, section
"Training without paying for padding".
"""

import functools

import keras
from keras import ops

from kmodels.backend.losses import projected_cross_entropy
from kmodels.backend.losses import real_positions
from kmodels.backend.losses import sparse_cross_entropy
from kmodels.backend.replicas import sum_over_replicas
from kmodels.backend.rnn import custom_gradient
from kmodels.seq2seq import losses
from kmodels.seq2seq.masking import PAD_ID

# Rows per chunk on TensorFlow and JAX. A batch projects its real positions
# rounded up to a whole chunk (half a chunk wasted on average): with 320, the
# benchmark batch's 941 real positions of 1,280 project 960 rows, with 512
# they projected 1,024. Measured on the Seq2Seq train step, alternated in one
# process: 320 against 512, JAX 0.90-0.98 and TensorFlow 0.97 of the time.
# The loss alone on JAX: 160 and 256 no faster than 320, 1,024 1.3x slower
# than 512 (a larger logits chunk).
DEFAULT_CHUNK_SIZE = 320


def fused_masked_loss(
    features,
    kernel,
    bias,
    y_true,
    sample_weight=None,
    label_smoothing=0.0,
    chunk_size=DEFAULT_CHUNK_SIZE,
):
    """`MaskedLoss(label_smoothing)(y_true, features @ kernel + bias,
    sample_weight)`, computed on the real positions only.

    Padded positions (label 0) cost nothing: they are neither projected nor
    differentiated (their `features` gradient is 0, as in the dense path).
    The loop runs `ceil(real positions / chunk_size)` chunks, each
    materialising `(chunk_size, vocab)` logits at most. Float32 only.

    Args:
        features: float32 `(batch, t, units)`, the decoder's states before
            its output layer.
        kernel: float32 `(units, vocab)`, the output layer's kernel.
        bias: float32 `(vocab,)`, its bias.
        y_true: int `(batch, t)` (or `(batch, t, 1)`) target ids; 0 is
            padding.
        sample_weight: optional `(batch,)` or `(batch, t)` weights, as in
            `MaskedLoss`.
        label_smoothing: float in `[0, 1]`, as in `MaskedLoss`.
        chunk_size: int >= 1, positions per chunk.

    Returns:
        A float32 scalar: `MaskedLoss`'s value (0 when no real token has a
        nonzero weight; NaN when a real label is outside `[0, vocab)`).

    Raises:
        ValueError: when the shapes do not agree (`features (batch, t,
            units)`, `kernel (units, vocab)`, `bias (vocab,)`, `y_true
            (batch, t)`), `sample_weight` or `label_smoothing` is invalid,
            or `chunk_size` is not a positive int.
        TypeError: when `features` is not float32.

    Example:
    >>> import numpy as np
    >>> from kmodels.seq2seq import masked_loss
    >>> from kmodels.seq2seq.fused_loss import fused_masked_loss
    >>> rng = np.random.default_rng(0)
    >>> h = rng.normal(size=(2, 3, 4)).astype("float32")
    >>> w = rng.normal(size=(4, 6)).astype("float32")
    >>> b = np.zeros(6, "float32")
    >>> y = np.array([[2, 1, 0], [3, 0, 0]])
    >>> fused = float(fused_masked_loss(h, w, b, y))
    >>> bool(np.isclose(fused, float(masked_loss(y, h @ w + b)), atol=1e-6))
    True

    See docs/seq2seq.md, section "Training without paying for padding".
    """
    smoothing = losses._smoothing(label_smoothing)
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or chunk_size < 1
    ):
        raise ValueError(
            "fused_masked_loss expects chunk_size to be an int >= 1; got "
            f"{chunk_size!r}"
        )
    features = ops.convert_to_tensor(features)
    kernel = ops.convert_to_tensor(kernel)
    bias = ops.convert_to_tensor(bias)
    _check(features, kernel, bias, y_true)
    labels = losses._labels(ops.convert_to_tensor(y_true))
    real = ops.not_equal(labels, PAD_ID)
    weight = ops.cast(real, "float32")
    if sample_weight is not None:
        weight = weight * losses._token_weights(
            "fused_masked_loss", sample_weight, labels, "float32"
        )
    count = sum_over_replicas(ops.sum(weight))
    safe = ops.where(ops.greater(count, 0.0), count, 1.0)
    # Each real position's share of the mean (0 on padding).
    scale = ops.where(real, weight / safe, 0.0)
    units, vocab = kernel.shape
    flat_labels = ops.reshape(labels, (-1,))
    positions = real_positions(ops.reshape(real, (-1,)))
    if positions is not None:
        # Eager torch: one product over the real positions, differentiated
        # by autograd.
        return _gathered(
            ops.take(ops.reshape(features, (-1, units)), positions, axis=0),
            kernel,
            bias,
            ops.take(flat_labels, positions),
            ops.take(ops.reshape(scale, (-1,)), positions),
            smoothing,
        )
    f = _fused(chunk_size, smoothing)
    # Reshaped, variables become tensors: `tf.custom_gradient` refuses a
    # function that reads variables itself.
    (loss,) = f(
        ops.reshape(features, (-1, units)),
        ops.reshape(kernel, (units, vocab)),
        ops.reshape(bias, (vocab,)),
        flat_labels,
        ops.reshape(scale, (-1,)),
    )
    return loss


def _gathered(features, kernel, bias, labels, scale, smoothing):
    """The loss of the real positions `features (n, units)`, with the
    labels and shares of the mean `scale` of each."""
    vocab = kernel.shape[-1]
    in_range = ops.logical_and(
        ops.greater_equal(labels, 0), ops.less(labels, vocab)
    )
    safe = ops.where(in_range, labels, 0)
    loss = projected_cross_entropy(safe, features, kernel, bias, smoothing)
    if loss is None:
        logits = ops.matmul(features, kernel) + bias
        loss = sparse_cross_entropy(safe, logits)
        if smoothing:
            uniform = ops.logsumexp(logits, axis=-1) - ops.mean(logits, axis=-1)
            loss = (1.0 - smoothing) * loss + smoothing * uniform
    loss = ops.where(in_range, loss, float("nan"))
    return ops.sum(loss * scale)


def _check(features, kernel, bias, y_true):
    dtypes = {
        name: keras.backend.standardize_dtype(x.dtype)
        for name, x in (("features", features), ("kernel", kernel))
    }
    for name, dtype in dtypes.items():
        if dtype != "float32":
            raise TypeError(
                f"fused_masked_loss expects float32 {name}; got {dtype}"
            )
    f_shape = tuple(features.shape)
    k_shape = tuple(kernel.shape)
    b_shape = tuple(bias.shape)
    y_shape = tuple(y_true.shape)
    if len(y_shape) == 3 and y_shape[-1] == 1:
        y_shape = y_shape[:2]
    agree = (
        len(f_shape) == 3
        and len(k_shape) == 2
        and len(b_shape) == 1
        and len(y_shape) == 2
        and f_shape[-1] == k_shape[0]
        and k_shape[1] == b_shape[0]
    )
    if agree:
        for a, b in zip(f_shape[:2], y_shape):
            if a is not None and b is not None and a != b:
                agree = False
    if not agree:
        raise ValueError(
            "fused_masked_loss expects features (batch, t, units), kernel "
            "(units, vocab), bias (vocab,) and y_true (batch, t); got "
            f"features {losses._fmt(f_shape)}, kernel {losses._fmt(k_shape)}"
            f", bias {losses._fmt(b_shape)} and y_true "
            f"{losses._fmt(y_shape)}"
        )


@functools.lru_cache(maxsize=16)
def _fused(chunk_size, smoothing):
    """The differentiable `(features, kernel, bias, labels, scale) ->
    (loss,)` over flat positions."""

    def forward(features, kernel, bias, labels, scale):
        units, vocab = kernel.shape
        n = ops.shape(features)[0]
        real = ops.not_equal(labels, PAD_ID)
        # Real positions first; any order among them (the sum is the same).
        order = ops.argsort(ops.cast(ops.logical_not(real), "int32"))
        n_real = ops.sum(ops.cast(real, "int32"))
        # One chunk of zeros after the last position: every chunk's slice
        # stays inside the tensors whatever the number of real positions.
        h = ops.concatenate(
            [ops.take(features, order, axis=0), ops.zeros((chunk_size, units))]
        )
        pad_int = ops.zeros((chunk_size,), "int32")
        y = ops.concatenate([ops.take(labels, order), pad_int])
        s = ops.concatenate(
            [ops.take(scale, order), ops.zeros((chunk_size,), scale.dtype)]
        )
        on = ops.concatenate(
            [ops.take(ops.cast(real, "int32"), order), pad_int]
        )
        n_chunks = (n_real + chunk_size - 1) // chunk_size
        positions = ops.arange(vocab, dtype="int32")

        def body(i, total, d_h, d_kernel, d_bias):
            start = i * chunk_size
            h_c = ops.slice(h, (start, 0), (chunk_size, units))
            y_c = ops.slice(y, (start,), (chunk_size,))
            s_c = ops.slice(s, (start,), (chunk_size,))
            on_c = ops.cast(ops.slice(on, (start,), (chunk_size,)), "bool")
            logits = ops.matmul(h_c, kernel) + bias
            in_range = ops.logical_and(
                ops.greater_equal(y_c, 0), ops.less(y_c, vocab)
            )
            safe_y = ops.where(in_range, y_c, 0)
            lse = ops.logsumexp(logits, axis=-1)
            # The label's logit gathered: a `where` over the whole
            # `(chunk, vocab)` logits was one more pass over them.
            picked = ops.take_along_axis(logits, safe_y[:, None], axis=-1)
            loss = lse - picked[:, 0]
            if smoothing:
                loss = (1.0 - smoothing) * loss + smoothing * (
                    lse - ops.mean(logits, axis=-1)
                )
            loss = ops.where(in_range, loss, float("nan"))
            total = total + ops.sum(ops.where(on_c, loss * s_c, 0.0))
            # d loss / d logits = scale * (softmax - target), with target
            # the (smoothed) one-hot label; 0 off range (the dense path's
            # `where` passes no gradient there either). One elementwise
            # pass: the one-hot part is a `where` fused into it.
            g = ops.where(ops.logical_and(on_c, in_range), s_c, 0.0)
            hit = ops.equal(positions[None, :], safe_y[:, None])
            d_logits = ops.exp(logits - lse[:, None]) * g[:, None]
            d_logits = d_logits - ops.where(
                hit, (g * (1.0 - smoothing))[:, None], 0.0
            )
            if smoothing:
                d_logits = d_logits - (g * (smoothing / vocab))[:, None]
            d_h = ops.slice_update(
                d_h, (start, 0), ops.matmul(d_logits, ops.transpose(kernel))
            )
            d_kernel = d_kernel + ops.matmul(ops.transpose(h_c), d_logits)
            d_bias = d_bias + ops.sum(d_logits, axis=0)
            return i + 1, total, d_h, d_kernel, d_bias

        _, total, d_h, d_kernel, d_bias = ops.while_loop(
            lambda i, *_: ops.less(i, n_chunks),
            body,
            (
                ops.zeros((), "int32"),
                ops.zeros((), "float32"),
                ops.zeros_like(h),
                ops.zeros_like(kernel),
                ops.zeros_like(bias),
            ),
        )
        # Back to the positions' own order.
        d_features = ops.take(d_h[:n], ops.argsort(order), axis=0)
        return (total,), (d_features, d_kernel, d_bias, scale)

    def backward(residuals, gradients):
        d_features, d_kernel, d_bias, scale = residuals
        g = gradients[0]
        return (
            d_features * g,
            d_kernel * g,
            d_bias * g,
            None,
            ops.zeros_like(scale),
        )

    def output_shapes(features, kernel, bias, labels, scale):
        return ((),)

    return custom_gradient(forward, backward, output_shapes)
