import numpy as np


def _log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sparse_softmax_cross_entropy(labels, logits):
    """Per-position `-log softmax(logits)[label]`, shape `labels.shape`."""
    labels = np.asarray(labels)
    logp = _log_softmax(logits)
    return -np.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]


def smoothed_cross_entropy(labels, logits, label_smoothing):
    """Per-position cross-entropy against the smoothed target distribution
    `(1 - e) * one_hot(label) + e / vocab` (Keras' `label_smoothing`),
    written out over the whole vocabulary."""
    labels = np.asarray(labels)
    logp = _log_softmax(logits)
    vocab = logp.shape[-1]
    target = np.eye(vocab)[labels] * (1.0 - label_smoothing)
    target += label_smoothing / vocab
    return -(target * logp).sum(axis=-1)


def masked_cross_entropy(
    labels, logits, pad_id=0, sample_weight=None, label_smoothing=0.0
):
    """Weighted mean cross-entropy over the positions whose label is not
    `pad_id`: `sum(loss * m * w) / sum(m * w)` with `m` the real-token mask
    and `w` the weights (`(batch,)` per example or `(batch, t)` per token,
    1 when `sample_weight` is None). 0.0 when `sum(m * w)` is 0 (no real
    token with a nonzero weight). With `label_smoothing`, `loss` is
    `smoothed_cross_entropy`."""
    labels = np.asarray(labels)
    mask = (labels != pad_id).astype(np.float64)
    weight = mask
    if sample_weight is not None:
        w = np.asarray(sample_weight, np.float64)
        if w.ndim == 1:
            w = w[:, None]
        weight = mask * w
    count = weight.sum()
    if count == 0:
        return 0.0
    if label_smoothing:
        loss = smoothed_cross_entropy(labels, logits, label_smoothing)
    else:
        loss = sparse_softmax_cross_entropy(labels, logits)
    return float(np.where(mask > 0, loss * weight, 0.0).sum() / count)


def masked_accuracy(labels, logits, pad_id=0):
    """Share of non-pad positions whose argmax equals the label; 0.0 when
    there is none."""
    labels = np.asarray(labels)
    mask = labels != pad_id
    if not mask.any():
        return 0.0
    hit = np.argmax(np.asarray(logits), axis=-1) == labels
    return float((hit & mask).sum() / mask.sum())
