import numpy as np

from kmodels.testing.oracle.sparse_optimizer import sparse_optimizer_step


def _bag_weights(ids, weights, pad_id, combiner):
    """Per-entry factors `w_j / N` of each bag (`ids` `(..., bag)`): the
    weight of entry `j` (1 without `weights`, 0 for padding) over the bag's
    norm `N`: 1 (sum), `sum_j w_j` (mean) or `sqrt(sum_j w_j^2)` (sqrtn);
    0 for every entry of a bag whose norm is 0."""
    ids = np.asarray(ids)
    w = np.ones(ids.shape) if weights is None else np.asarray(weights, float)
    if w.shape != ids.shape:
        raise ValueError(f"weights {w.shape} must match ids {ids.shape}")
    w = np.where(ids == pad_id, 0.0, w) if pad_id is not None else w
    if combiner == "sum":
        norm = np.ones(ids.shape[:-1] + (1,))
    elif combiner == "mean":
        norm = w.sum(axis=-1, keepdims=True)
    elif combiner == "sqrtn":
        norm = np.sqrt((w * w).sum(axis=-1, keepdims=True))
    else:
        raise ValueError(f"unknown combiner {combiner!r}")
    safe = np.where(norm == 0, 1.0, norm)
    return np.where(norm == 0, 0.0, w / safe)


def embedding_bag(ids, table, combiner, weights=None, pad_id=None):
    """Combined embedding of padded bags of ids (TensorFlow's
    `embedding_lookup_sparse`, TorchRec's `EmbeddingBag`):
    `o = sum_j w_j e[ids_j] / N` over the last axis of `ids`, with `N` 1
    (`"sum"`), `sum_j w_j` (`"mean"`) or `sqrt(sum_j w_j^2)` (`"sqrtn"`).
    Entries equal to `pad_id` have weight 0; a bag whose `N` is 0 gives
    zeros.

    Args:
        ids: integer array `(..., bag)`.
        table: float array `(rows, dim)`.
        combiner: `"sum"`, `"mean"` or `"sqrtn"`.
        weights: optional float array of the shape of `ids` (1 if `None`).
        pad_id: optional id that marks padding.

    Returns:
        float64 array `ids.shape[:-1] + (dim,)`.
    """
    factors = _bag_weights(ids, weights, pad_id, combiner)
    rows = np.asarray(table, np.float64)[np.asarray(ids)]
    return (rows * factors[..., None]).sum(axis=-2)


def embedding_bag_row_grads(
    ids, combiner, output_grads, weights=None, pad_id=None
):
    """The gradient of each looked-up row of `embedding_bag` given the
    gradient `g` of each bag's output: `(w_j / N) g` for entry `j`.

    Returns:
        `(ids, grads)`: the flat ids of the entries that are not padding
        and their gradients `(n, dim)`, ready for `sparse_optimizer_step`
        (padding names no row: it does not move, its slots neither).
    """
    ids = np.asarray(ids)
    factors = _bag_weights(ids, weights, pad_id, combiner)
    g = np.asarray(output_grads, np.float64)
    grads = factors[..., None] * g[..., None, :]
    keep = (ids != pad_id) if pad_id is not None else np.ones(ids.shape, bool)
    return ids[keep], grads[keep]


def summed_sparse_step(table, slots, step, features, **kwargs):
    """One row-sparse optimizer step of a table shared by several features
    in one train step: the `(ids, grads)` of every feature are pooled, so
    each row's gradient is the sum over all features and all occurrences,
    and the optimizer runs once (one `step`, one slot update per row), as a
    dense gradient of the shared table would be summed before one update.

    Args:
        table, slots, step: as `sparse_optimizer_step`.
        features: list of `(ids, grads)` pairs (`grads` of shape
            `ids.shape + (dim,)`).
        **kwargs: the rule, as `sparse_optimizer_step`.

    Returns:
        `(table, slots)` after the step.
    """
    dim = np.asarray(table).shape[1]
    ids = np.concatenate([np.asarray(i).reshape(-1) for i, _ in features])
    grads = np.concatenate(
        [np.asarray(g, np.float64).reshape(-1, dim) for _, g in features]
    )
    return sparse_optimizer_step(table, slots, step, ids, grads, **kwargs)
