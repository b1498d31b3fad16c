"""Masked loss and accuracy for padded target sequences (id 0 is padding).

Both check the static shapes of their arguments (known when a compiled step
is traced) and raise the same `ValueError` on every backend when the
prediction is not `(batch, t, vocabulary)` logits matching the labels
`(batch, t)`. The classic mistake, a model returning the encoder context
`(batch, s, units)`, crashes TensorFlow with "Graph execution error" and gives
a meaningless number on JAX without this check.

A label outside `[0, y_pred.shape[-1])` cannot be detected before the step
runs (its value is data); it makes `masked_loss` NaN on every backend instead
of crashing TensorFlow and torch and passing silently on JAX.

A batch without a single real token (all padding, or every real token
weighted 0) is not an error: `masked_loss` is exactly 0 there, with zero
gradients, and `masked_acc` is 0.
"""

import keras
import numpy as np
from keras import ops

from kmodels.backend import keras_internals
from kmodels.backend.losses import sparse_cross_entropy
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


def _check_logits(name, y_pred):
    """Integer "logits" (e.g. ids passed by mistake) are refused, the same
    on every backend, instead of being cast to float on some."""
    dtype = getattr(y_pred, "dtype", None)
    if dtype is None:
        dtype = np.asarray(y_pred).dtype
    dtype = keras.backend.standardize_dtype(dtype)
    if "float" not in dtype:
        raise TypeError(
            f"{name} expects float logits y_pred of shape (batch, t, vocab); "
            f"got dtype {dtype}. Did you pass the target ids as y_pred?"
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


def _static_shape(x):
    # None when even the rank is unknown: TensorFlow relaxes a retraced
    # step's `sample_weight` to an unknown rank when its shape changed.
    try:
        return tuple(x.shape)
    except ValueError:
        return None


def _token_weights(name, sample_weight, labels, dtype):
    """`sample_weight` as `(batch, 1)` or `(batch, t)`, or a clear error."""
    weight = ops.cast(ops.convert_to_tensor(sample_weight), dtype)
    shape = _static_shape(weight)
    labels_shape = tuple(labels.shape)
    if shape is not None:
        squeezed = (
            shape[:-1] if len(shape) in (2, 3) and shape[-1] == 1 else shape
        )
        agree = len(squeezed) in (1, 2)
        for a, b in zip(squeezed, labels_shape):
            if a is not None and b is not None and a != b:
                agree = False
        if not agree:
            raise ValueError(
                f"{name} expects sample_weight of shape (batch,) (one weight "
                "per example) or (batch, t) (one per token) matching labels "
                f"y_true {_fmt(labels_shape)}; got sample_weight "
                f"{_fmt(shape)}"
            )
    # (batch,), (batch, 1) -> (batch, 1); (batch, t), (batch, t, 1) ->
    # (batch, t): both broadcast against the labels, whatever the rank.
    return ops.reshape(weight, (ops.shape(labels)[0], -1))


def _smoothing(value):
    """`label_smoothing` as a float in [0, 1], or a clear error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ValueError(
            "MaskedLoss expects label_smoothing to be a number in [0, 1]; "
            f"got {value!r} ({type(value).__name__})"
        )
    value = float(value)
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise ValueError(
            f"MaskedLoss expects label_smoothing in [0, 1]; got {value!r}"
        )
    return value


@keras.saving.register_keras_serializable(package="kmodels")
class MaskedLoss(keras.losses.Loss):
    """Softmax cross-entropy averaged over the non-padding positions.

    `masked_loss` is the ready-made instance; pass it (or `MaskedLoss()`) to
    `model.compile(loss=...)`. With `m` the real-token mask (label != 0) and
    `w` the weights (1 without `sample_weight`), the loss is
    `sum(token_loss * m * w) / sum(m * w)`, and exactly 0 when
    `sum(m * w)` is 0. It is computed in float32, as Keras' losses are.

    With `label_smoothing=e > 0`, `token_loss` is the cross-entropy
    against `(1 - e) * one_hot(label) + e / vocab` (Keras' definition for
    its categorical cross-entropies), that is
    `(1 - e) * (-log p[label]) + e * mean_v(-log p[v])`, on real tokens
    only: padding still counts for nothing. It needs finite logits for every
    id (a logit of -inf makes the smoothed loss infinite).

    Args:
        name: str. Name of the loss. Defaults to `"masked_loss"`.
        dtype: dtype of the computation and of the result. Defaults to
            `keras.backend.floatx()`.
        label_smoothing: float in `[0, 1]`. Defaults to `0.0`, the plain
            cross-entropy.

    Call arguments:
        y_true: int `(batch, t)` (or `(batch, t, 1)`) target ids; 0 is
            padding and is excluded.
        y_pred: float `(batch, t, vocab)` logits (not probabilities).
        sample_weight: optional `(batch,)` weights per example or
            `(batch, t)` per token (trailing axes of size 1 are dropped).
            Weights are expected to be >= 0.

    Returns:
        A scalar: the weighted mean above (0 when no real token has a
        nonzero weight); NaN when a real token's label is outside `[0, vocab)`.

    Raises:
        TypeError: when `y_pred` is not a float tensor (integer "logits").
        ValueError: when the static shapes do not match `(batch, t)` and
            `(batch, t, vocab)`, or `sample_weight` is neither `(batch,)`
            nor `(batch, t)`; when constructed with a `label_smoothing`
            that is not a number in `[0, 1]`.

    Example:
    >>> from kmodels.seq2seq import MaskedLoss, masked_loss
    >>> y_true = np.array([[2, 1, 0], [3, 0, 0]])
    >>> y_pred = np.zeros((2, 3, 4), "float32")
    >>> round(float(masked_loss(y_true, y_pred)), 4)  # log(4)
    1.3863
    >>> float(masked_loss(np.zeros((2, 3), "int32"), y_pred))
    0.0
    >>> y_pred[0, 0, 2] = 5.0
    >>> round(float(masked_loss(y_true, y_pred, sample_weight=[0, 1])), 4)
    1.3863
    >>> smoothed = MaskedLoss(label_smoothing=0.1)
    >>> round(float(smoothed(y_true, np.zeros((2, 3, 4), "float32"))), 4)
    1.3863

    See docs/seq2seq.md, section "MaskedLoss".
    """

    # Class ids against logits on the last axis: `kmodels.diagnostics`
    # checks the labels against the output width, as for Keras' sparse
    # categorical cross-entropy.
    sparse_categorical = True

    def __init__(self, name="masked_loss", dtype=None, label_smoothing=0.0):
        self.label_smoothing = _smoothing(label_smoothing)
        super().__init__(name=name, reduction=None, dtype=dtype)

    @property
    def __name__(self):
        # `masked_loss` used to be a function: keep `masked_loss.__name__`.
        return self.name

    def __call__(self, y_true, y_pred, sample_weight=None):
        _check_logits(self.name, y_pred)
        _check_shapes(self.name, y_true, y_pred)
        with keras.name_scope(self.name):
            labels = _labels(ops.convert_to_tensor(y_true))
            logits = ops.cast(ops.convert_to_tensor(y_pred), self.dtype)
            loss = self.call(labels, logits)
            real = ops.not_equal(labels, PAD_ID)
            weight = ops.cast(real, self.dtype)
            if sample_weight is not None:
                weight = weight * _token_weights(
                    self.name, sample_weight, labels, self.dtype
                )
            # `where`, not a product: a padded position whose logits give an
            # infinite loss must not turn the sum into NaN.
            total = ops.sum(ops.where(real, loss * weight, 0.0))
            count = sum_over_replicas(ops.sum(weight))
            # The count depends on labels and weights only (no gradient):
            # dividing by 1 when it is 0 keeps the loss and its gradient 0.
            safe = ops.where(ops.greater(count, 0.0), count, 1.0)
            return ops.divide(total, safe)

    def call(self, y_true, y_pred):
        """Per-position cross-entropy `(batch, t)`: NaN where the label is
        outside `[0, vocab)`, padding included (masked in `__call__`)."""
        labels = ops.cast(y_true, "int32")
        vocab = y_pred.shape[-1]
        in_range = ops.logical_and(
            ops.greater_equal(labels, 0), ops.less(labels, vocab)
        )
        safe = ops.where(in_range, labels, 0)
        loss = sparse_cross_entropy(safe, y_pred)
        if self.label_smoothing:
            # -sum_v q_v log p_v with q = (1 - e) one_hot + e / V:
            # (1 - e) * CE + e * (logsumexp(z) - mean(z)).
            e = self.label_smoothing
            uniform = ops.logsumexp(y_pred, axis=-1) - ops.mean(y_pred, axis=-1)
            loss = (1.0 - e) * loss + e * uniform
        return ops.where(in_range, loss, float("nan"))

    def get_config(self):
        return {
            "label_smoothing": self.label_smoothing,
            "name": self.name,
            "dtype": keras_internals.loss_dtype_policy(self).name,
        }


masked_loss = MaskedLoss()
# `.keras` files saved when `masked_loss` was a registered function name it
# "kmodels>masked_loss": they load with the instance.
keras.saving.get_custom_objects()["kmodels>masked_loss"] = masked_loss


@keras.saving.register_keras_serializable(package="kmodels")
def masked_acc(y_true, y_pred):
    """Share of non-padding positions whose argmax logit is the label.

    0 for a batch without real tokens (all padding), never NaN. Inside a
    `tf.distribute` step with several replicas, hits and positions are
    counted over all replicas, so every replica reports the accuracy of the
    global batch.

    As a compiled metric (`metrics=[masked_acc]`), Keras averages the value
    of each batch over the epoch with equal weights per batch (not per
    token), an all-padding batch counting as accuracy 0; it ignores
    `sample_weight`. Under `weighted_metrics=` Keras would multiply this
    batch value by the weights, which is not a per-example weighting: use
    `metrics=`.

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
    _check_logits("masked_acc", y_pred)
    _check_shapes("masked_acc", y_true, y_pred)
    labels = _labels(y_true)
    predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
    mask = ops.not_equal(labels, PAD_ID)
    hits = ops.logical_and(ops.equal(predicted, labels), mask)
    count = sum_over_replicas(ops.sum(ops.cast(mask, "float32")))
    return sum_over_replicas(ops.sum(ops.cast(hits, "float32"))) / ops.maximum(
        count, 1.0
    )
