"""Masked loss and accuracy for padded target sequences (id 0 is padding).

Both functions check the static shapes of their arguments (known when a
compiled step is traced) and raise the same `ValueError` on every backend when
the prediction is not `(batch, t, vocabulary)` logits matching the labels
`(batch, t)`. The classic mistake, a model returning the encoder context
`(batch, s, units)`, crashes TensorFlow with "Graph execution error" and gives
a meaningless number on JAX without this check.

A label outside `[0, y_pred.shape[-1])` cannot be detected before the step
runs (its value is data); it makes `masked_loss` NaN on every backend instead
of crashing TensorFlow and torch and passing silently on JAX.
"""

import keras
from keras import ops

from kmodels.backend.replicas import sum_over_replicas
from kmodels.seq2seq.masking import PAD_ID


def _check_shapes(name, y_true, y_pred):
    true_shape = tuple(y_true.shape)
    pred_shape = tuple(y_pred.shape)
    if len(true_shape) == 3 and true_shape[-1] == 1:
        true_shape = true_shape[:2]
    agree = len(true_shape) == 2 and len(pred_shape) == 3
    if agree:
        for a, b in zip(true_shape, pred_shape[:2]):
            if a is not None and b is not None and a != b:
                agree = False
    if not agree:
        raise ValueError(
            f"{name} expects logits y_pred of shape (batch, t, vocab) "
            "matching labels y_true of shape (batch, t); got y_true "
            f"{_fmt(true_shape)} and y_pred {_fmt(pred_shape)}. Did call() "
            "return the encoder context instead of the decoder logits?"
        )


def _fmt(shape):
    return (
        "("
        + ", ".join("None" if d is None else str(d) for d in shape)
        + (",)" if len(shape) == 1 else ")")
    )


def _labels(y_true):
    if len(y_true.shape) == 3:
        y_true = ops.squeeze(y_true, axis=-1)
    return ops.cast(y_true, "int32")


@keras.saving.register_keras_serializable(package="kmodels")
def masked_loss(y_true, y_pred):
    """Mean softmax cross-entropy over the non-padding positions.

    Args:
        y_true: int `(batch, t)` target ids; 0 is padding and is excluded.
        y_pred: float `(batch, t, vocab)` logits (not probabilities).

    Returns:
        A scalar: the sum of per-token losses divided by the number of real
        tokens. NaN when a label lies outside `[0, vocab)`. Inside a
        `tf.distribute` step with several replicas, the divisor is the
        number of real tokens over all replicas (as
        `tf.nn.compute_average_loss` divides by the global batch size), so
        the gradients the strategy sums are those of the global batch.

    Raises:
        ValueError: when the static shapes do not match `(batch, t)` and
            `(batch, t, vocab)`.

    Example:
    >>> import numpy as np
    >>> from kmodels.seq2seq import masked_acc, masked_loss
    >>> y_true = np.array([[2, 1, 0]])
    >>> y_pred = np.zeros((1, 3, 4), "float32")
    >>> round(float(masked_loss(y_true, y_pred)), 4)  # log(4)
    1.3863
    """
    _check_shapes("masked_loss", y_true, y_pred)
    labels = _labels(y_true)
    logits = ops.convert_to_tensor(y_pred)
    vocab = logits.shape[-1]
    in_range = ops.logical_and(
        ops.greater_equal(labels, 0), ops.less(labels, vocab)
    )
    safe = ops.where(in_range, labels, 0)
    log_probs = ops.log_softmax(logits, axis=-1)
    picked = ops.take_along_axis(log_probs, safe[..., None], axis=-1)
    loss = -ops.squeeze(picked, axis=-1)
    loss = ops.where(in_range, loss, float("nan"))
    mask = ops.cast(ops.not_equal(labels, PAD_ID), loss.dtype)
    return ops.sum(loss * mask) / sum_over_replicas(ops.sum(mask))


@keras.saving.register_keras_serializable(package="kmodels")
def masked_acc(y_true, y_pred):
    """Share of non-padding positions whose argmax logit is the label.

    Inside a `tf.distribute` step with several replicas, hits and positions
    are counted over all replicas, so every replica reports the accuracy of
    the global batch.

    Args:
        y_true: int `(batch, t)`; 0 is padding and is excluded.
        y_pred: float `(batch, t, vocab)` logits.

    Raises:
        ValueError: as `masked_loss`.

    Example:
    >>> import numpy as np
    >>> from kmodels.seq2seq import masked_acc, masked_loss
    >>> y_pred = np.eye(4, dtype="float32")[None, [2, 3, 1]]
    >>> float(masked_acc(np.array([[2, 1, 0]]), y_pred))
    0.5
    """
    _check_shapes("masked_acc", y_true, y_pred)
    labels = _labels(y_true)
    predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
    mask = ops.not_equal(labels, PAD_ID)
    hits = ops.logical_and(ops.equal(predicted, labels), mask)
    return sum_over_replicas(
        ops.sum(ops.cast(hits, "float32"))
    ) / sum_over_replicas(ops.sum(ops.cast(mask, "float32")))
