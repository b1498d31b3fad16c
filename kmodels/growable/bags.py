"""What a `GrowableEmbedding` call reads: one feature or several sharing
the table, padded bags of ids, their optional weights, and how a bag's
rows combine into one vector (`combiner`).

The structure is checked on symbolic and concrete calls alike, with the
same message on every backend.
"""

import keras
import numpy as np
from keras import ops

COMBINERS = ("sum", "mean", "sqrtn")


def features(where, combiner, inputs, weights):
    """`(ids of each feature, weights of each, several)`: `inputs` is one
    tensor of ids or a list of them (one table shared by several features,
    `several=True`); `weights` is `None`, a tensor, or a list like
    `inputs`. Raises on a structure the layer cannot read; `where` names
    the layer."""
    several = is_feature_list(inputs)
    found = list(inputs) if several else [inputs]
    for ids in found:
        _refuse_ragged(ids, where, "ids")
    if weights is None:
        weights = [None] * len(found)
    elif several:
        if not isinstance(weights, (list, tuple)) or len(weights) != len(found):
            raise ValueError(
                f"{where} got {len(found)} features: `weights` must "
                f"be None or a list of {len(found)} (tensors or "
                f"None), one per feature; got {type(weights).__name__}."
            )
        weights = list(weights)
    else:
        weights = [weights]
    if combiner is None and any(w is not None for w in weights):
        raise ValueError(
            f"{where} got `weights` but has combiner=None: per-id weights "
            "scale the ids of a bag before they are combined. Pass "
            'combiner="sum", "mean" or "sqrtn".'
        )
    for ids, w in zip(found, weights):
        shape = _static_shape(ids)
        if combiner is not None and shape is not None and len(shape) < 2:
            raise ValueError(
                f"{where} has combiner={combiner!r}: it expects "
                "padded bags of ids of shape (batch, bag) (the last "
                f"axis is the bag); got shape {shape}."
            )
        if w is None:
            continue
        _refuse_ragged(w, where, "weights")
        w_shape = _static_shape(w)
        if shape is None or w_shape is None:
            continue
        same = len(shape) == len(w_shape) and all(
            a is None or b is None or a == b for a, b in zip(shape, w_shape)
        )
        if not same:
            raise ValueError(
                f"{where}: `weights` must have the shape of the ids "
                f"(one weight per id), {shape}; got {w_shape}."
            )
    return found, weights, several


def check_integer_ids(where, features):
    """Raises a `TypeError` for a feature whose ids are not integers."""
    for ids in features:
        dtype = keras.backend.standardize_dtype(ids.dtype)
        if not dtype.startswith(("int", "uint")):
            raise TypeError(
                f"{where} expects integer ids; got dtype {dtype}. Map raw "
                "keys to rows with kmodels.layers.KeyIndex."
            )


def feature_outputs(layer, rows, features, flats, weights, several):
    """The output of each feature: its part of the looked-up `rows` (one
    lookup for all `several` features, in order; `flats` are their flat
    ids) in the shape of its ids, plus `output_dim`, or with
    `layer.combiner` one vector per bag."""
    outputs = []
    start = 0
    for ids, part, w in zip(features, flats, weights):
        shape = ops.shape(ids)
        if several:
            stop = start + ops.shape(part)[0]
            part = rows[start:stop]
            start = stop
        else:
            part = rows
        part = ops.reshape(part, tuple(shape) + (layer.output_dim,))
        if layer.combiner is not None:
            part = combine(part, ids, w, layer.combiner, layer.mask_zero)
        outputs.append(part)
    return outputs


def combine(rows, ids, weights, combiner, mask_zero):
    """Combines the rows `(..., bag, dim)` of each bag into one vector
    `(..., dim)`: sum, mean or sqrtn of the rows times their weights
    (1 without `weights`; 0 for padding), as TensorFlow's
    `embedding_lookup_sparse`. An empty bag gives zeros."""
    dtype = rows.dtype
    if weights is None:
        w = ops.ones(ops.shape(ids), dtype)
    else:
        w = ops.cast(weights, dtype)
    if mask_zero:
        w = w * ops.cast(ops.not_equal(ids, 0), dtype)
    total = ops.sum(rows * ops.expand_dims(w, -1), axis=-2)
    if combiner == "sum":
        return total
    if combiner == "mean":
        norm = ops.sum(w, axis=-1, keepdims=True)
    else:
        norm = ops.sqrt(ops.sum(w * w, axis=-1, keepdims=True))
    nonzero = ops.not_equal(norm, 0)
    # The division of an empty bag never runs (no NaN in its gradient).
    safe = ops.where(nonzero, norm, ops.ones_like(norm))
    return ops.where(nonzero, total / safe, ops.zeros_like(total))


def is_feature_list(inputs):
    """Whether `inputs` lists several features (tensors or arrays), as
    opposed to one nested Python list of ids."""
    return (
        isinstance(inputs, (list, tuple))
        and len(inputs) > 0
        and all(hasattr(x, "shape") and hasattr(x, "dtype") for x in inputs)
    )


def _static_shape(x):
    """The shape of `x` with `None` for unknown dimensions; `None` when
    unknown (a Python list is read as an array)."""
    shape = getattr(x, "shape", None)
    if shape is None:
        try:
            shape = np.asarray(x).shape
        except ValueError:
            return None
    try:
        return tuple(None if d is None else int(d) for d in shape)
    except TypeError:
        return None


def _refuse_ragged(x, where, name):
    kind = type(x).__name__
    if kind in ("RaggedTensor", "SparseTensor"):
        raise TypeError(
            f"{where} expects padded `{name}` (a dense tensor, padding id 0 "
            f"with mask_zero=True); got a {kind}. Pad it first, e.g. "
            "ragged.to_tensor() or keras.utils.pad_sequences."
        )
    if isinstance(x, (list, tuple)) and not is_feature_list(x):
        try:
            np.asarray(x)
        except ValueError:
            raise ValueError(
                f"{where} expects padded `{name}` of one shape (batch, bag); "
                "got Python lists of different lengths. Pad them first, e.g. "
                "keras.utils.pad_sequences, with id 0 and mask_zero=True."
            ) from None
