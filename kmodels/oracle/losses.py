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


def masked_cross_entropy(labels, logits, pad_id=0):
    """Mean cross-entropy over the positions whose label is not `pad_id`."""
    labels = np.asarray(labels)
    mask = (labels != pad_id).astype(np.float64)
    loss = sparse_softmax_cross_entropy(labels, logits)
    return float((loss * mask).sum() / mask.sum())


def masked_accuracy(labels, logits, pad_id=0):
    """Share of non-pad positions whose argmax equals the label."""
    labels = np.asarray(labels)
    mask = labels != pad_id
    hit = np.argmax(np.asarray(logits), axis=-1) == labels
    return float((hit & mask).sum() / mask.sum())
