"""Concrete input checks of kmodels' layers and models.

Every check here reads concrete data (NumPy arrays or eager backend tensors)
and raises the same exception, with the same message, on every backend:
`TypeError` for a wrong dtype, `ValueError` for a wrong value or shape. The
message names the owner and the argument, what was expected and what
arrived. The checks run before the data reaches a backend: JAX casts int64
NumPy ids to int32 (2**32 + 3 becomes 3) when it converts them.
"""

import contextlib
import threading
import warnings

import keras
import numpy as np
from keras import ops

from kmodels.arguments import check_int
from kmodels.backend import growth as growth_backend
from kmodels.backend import keras_internals
from kmodels.backend.contracts import local_numpy
from kmodels.backend.keras_internals import in_symbolic_scope

_STATE = threading.local()
_INT32_LIMIT = 2**31


@contextlib.contextmanager
def checked():
    """A scope whose inputs were already checked: the layers called inside
    it (a compiled step the contract hook checked, or the sublayers of a
    checked call) skip their own checks and do not warn."""
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1


def inputs_checked():
    """True inside `checked()`."""
    return bool(getattr(_STATE, "depth", 0))


def is_concrete(x):
    """True when `x` holds data: a NumPy value or an eager tensor."""
    if x is None or isinstance(x, (np.ndarray, np.generic, int, float)):
        return True
    return growth_backend.is_concrete(x)


def to_numpy(x):
    # What this process holds of a JAX array spread over processes.
    return np.asarray(local_numpy(x))


def _fmt(values):
    # Distinct by `repr`: NaNs are never equal, so a set would keep each.
    return sorted({repr(v): v for v in values.tolist()}.values(), key=repr)[:5]


# ------------------------------------------------------------ elementary
def check_ids(value, name, owner, vocabulary_size, dims="(batch, s)"):
    """Checks concrete token ids and returns them as a NumPy array.

    Accepted: an integer array (any width) or a float array holding whole
    numbers, of rank `len(dims)`, with at least one example and one
    position, every id in `[0, vocabulary_size)`.
    """
    array = to_numpy(value)
    rank = dims.count(",") + 1
    if array.dtype.kind not in "iuf":
        raise TypeError(
            f"{owner}: {name} must hold integer token ids {dims}; got dtype "
            f"{array.dtype}."
        )
    if array.ndim != rank:
        raise ValueError(
            f"{owner}: {name} must be a {rank}-D array of token ids {dims}; "
            f"got shape {array.shape}."
        )
    if 0 in array.shape:
        raise ValueError(
            f"{owner}: {name} must hold at least one example and one "
            f"position {dims}; got shape {array.shape}."
        )
    if array.dtype.kind == "f":
        # NaN is not whole either (nan != nan).
        fractional = array[~(np.round(array) == array)]
        if fractional.size:
            raise ValueError(
                f"{owner}: {name} must hold whole-number token ids; got "
                f"{_fmt(fractional)} (dtype {array.dtype})."
            )
    low, high = array.min(), array.max()
    if low < 0 or high >= vocabulary_size:
        bad = array[(array < 0) | (array >= vocabulary_size)]
        raise ValueError(
            f"{owner}: {name} must lie in [0, {vocabulary_size}) "
            f"(vocabulary_size={vocabulary_size}); got values {_fmt(bad)} "
            f"(min {low}, max {high})"
        )
    return array


def check_float(value, name, owner, dims, allow_integer=False):
    """Checks a concrete float tensor (or integer, with `allow_integer`) of
    rank `len(dims)`; returns its shape."""
    dtype = keras.backend.standardize_dtype(value.dtype)
    rank = dims.count(",") + 1
    numeric = "float" in dtype or (
        allow_integer and dtype.startswith(("int", "uint"))
    )
    if not numeric:
        kind = "a float or integer" if allow_integer else "a float"
        raise TypeError(
            f"{owner}: {name} must be {kind} tensor {dims}; got dtype {dtype}."
        )
    shape = tuple(int(d) for d in ops.shape(value))
    if len(shape) != rank:
        raise ValueError(
            f"{owner}: {name} must be a {rank}-D tensor {dims}; got shape "
            f"{shape}."
        )
    if 0 in shape:
        raise ValueError(
            f"{owner}: {name} must not be empty {dims}; got shape {shape}."
        )
    return shape


def check_mask(value, name, owner, expected_shape):
    """Checks a concrete mask: boolean (or integer holding 0 and 1 only)
    of `expected_shape`."""
    array = to_numpy(value)
    if array.dtype.kind not in "biu":
        raise TypeError(
            f"{owner}: {name} must be a boolean mask (batch, s); got dtype "
            f"{array.dtype}."
        )
    if (
        array.dtype.kind != "b"
        and array.size
        and not np.all((array == 0) | (array == 1))
    ):
        raise ValueError(
            f"{owner}: {name} must hold only 0 and 1 (True and False); got "
            f"values {_fmt(array[(array != 0) & (array != 1)])}."
        )
    if tuple(array.shape) != tuple(expected_shape):
        raise ValueError(
            f"{owner}: {name} must have the shape (batch, s) = "
            f"{tuple(expected_shape)} of the context; got {array.shape}."
        )


def check_same_batch(owner, first, second, sizes):
    if sizes[0] != sizes[1]:
        raise ValueError(
            f"{owner}: {first} and {second} must have the same batch size; "
            f"got {sizes[0]} and {sizes[1]}."
        )


def check_start_index(layer, start_index, length):
    """`PositionalEmbedding`'s `start_index` (a concrete int) against
    `length` positions and the layer's `sequence_length`."""
    start_index = check_int(
        start_index, "start_index", "PositionalEmbedding", 0
    )
    if length is not None and start_index + length > layer.sequence_length:
        raise ValueError(
            f"PositionalEmbedding holds {layer.sequence_length} "
            "positions (`sequence_length`); the inputs need "
            f"positions {start_index} to {start_index + length - 1}"
            f" (start_index={start_index}, {length} positions)."
        )
    return start_index


def check_growable_ids(layer, ids, training=None):
    """`GrowableEmbedding`'s ids: integer, >= 0, below `max_capacity` and
    2**31 (rows are int32), and, at inference with `unseen="error"`,
    below the capacity."""
    array = layer.check_ids(ids)
    if array.size and int(array.max()) >= _INT32_LIMIT:
        raise ValueError(
            f"GrowableEmbedding '{layer.name}' expects ids below 2**31 "
            f"(rows are int32); got {int(array.max())}."
        )
    if not training and layer.unseen == "error" and array.size:
        if int(array.max()) >= layer.capacity:
            raise ValueError(
                f"GrowableEmbedding '{layer.name}' got unseen id "
                f"{int(array.max())} at inference (capacity "
                f'{layer.capacity}) and unseen="error".'
            )
    return array


def check_bag_weights(layer, ids, weights):
    """`GrowableEmbedding`'s per-id bag weights (`ids`: the bags they
    weigh, already checked): finite for every combiner (a NaN or an
    infinite weight turns the bag, the loss and the rows it trains into
    NaN); with `"mean"`, which divides by the sum of a bag's weights, that
    sum must be > 0 in every bag with a non-zero weight (signed weights
    may cancel out: the mean is then undefined, or flips sign)."""
    array = to_numpy(weights)
    where = f"GrowableEmbedding '{layer.name}'"
    if array.dtype.kind not in "biuf":
        raise TypeError(
            f"{where} expects numeric bag `weights`; got dtype {array.dtype}."
        )
    if array.dtype.kind == "f":
        bad = array[~np.isfinite(array)]
        if bad.size:
            raise ValueError(
                f"{where} expects finite bag `weights` (combiner="
                f"{layer.combiner!r}); got {_fmt(bad)}: a NaN or infinite "
                "weight makes the bag's vector, the loss and the rows it "
                "trains NaN."
            )
    if layer.combiner != "mean" or not array.size:
        return
    array = array.astype(np.float64)
    if layer.mask_zero:
        # Padding (id 0) weighs nothing, whatever its weight says.
        array = np.where(to_numpy(ids) == 0, 0.0, array)
    sums = array.sum(axis=-1)
    bad = (sums <= 0) & np.any(array != 0, axis=-1)
    if bad.any():
        raise ValueError(
            f"{where} has combiner='mean', which divides by the sum of a "
            "bag's `weights`: it must be > 0 in every bag with a non-zero "
            f"weight; got sums {_fmt(sums[bad])}. Use combiner='sum' or "
            "'sqrtn' for weights that cancel out."
        )


# ------------------------------------------------------- per entry point
def check_layer(layer, arguments, training=None):
    """Checks the concrete `arguments` (a dict from `layer.call`'s argument
    names to values; absent or `None` ones are skipped) of a kmodels layer
    or model against its contract.

    Each kmodels class states its contract in a method
    `_check_call_arguments(arguments, training)` built from the checks of
    this module; a layer without one has nothing to check.
    """
    check = getattr(layer, "_check_call_arguments", None)
    if check is not None:
        check(arguments, training)


def check_positional_embedding_inputs(layer, arguments, training=None):
    """`PositionalEmbedding`'s `inputs` (checked as ids of a plain
    `keras.layers.Embedding`, or against the contract of the wrapped layer)
    and `start_index`."""
    inputs = arguments.get("inputs")
    inner = layer.embedding
    length = None
    if inputs is not None:
        if type(inner) is keras.layers.Embedding:
            ids = check_ids(
                inputs,
                "inputs",
                "PositionalEmbedding",
                inner.input_dim,
                "(batch, seq)",
            )
            length = ids.shape[1]
        else:
            check_layer(inner, {"inputs": inputs}, training)
    start_index = arguments.get("start_index")
    if start_index is not None and not isinstance(start_index, int):
        start_index = to_numpy(start_index)
        if start_index.ndim == 0:
            # A Python scalar, so the message reads as the user wrote it.
            start_index = start_index.item()
        check_start_index(layer, start_index, length)


def check_patch_embedding_inputs(layer, images):
    """`PatchEmbedding`'s images: a float or integer `(batch, height,
    width, channels)` tensor whose spatial size the patches divide."""
    shape = check_float(
        images,
        "inputs",
        "PatchEmbedding",
        "(batch, height, width, channels)",
        # Integer pixels (uint8) are cast in `call`.
        allow_integer=True,
    )
    layer._check_shape(shape)


def check_translator_inputs(layer, inputs, labels=None):
    """`Translator`'s `(context_tokens, target_in)` and, when given, the
    labels `target_out`."""
    if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
        raise ValueError(
            "Translator: inputs must be a tuple (context_tokens (batch, s), "
            f"target_in (batch, t)); got {type(inputs).__name__}"
            + (
                f" of {len(inputs)}"
                if isinstance(inputs, (tuple, list))
                else ""
            )
            + "."
        )
    context = check_ids(
        inputs[0], "context_tokens", "Translator", layer.context_vocabulary_size
    )
    target = check_ids(
        inputs[1],
        "target_in",
        "Translator",
        layer.target_vocabulary_size,
        "(batch, t)",
    )
    check_same_batch(
        "Translator",
        "context_tokens",
        "target_in",
        (len(context), len(target)),
    )
    if labels is not None:
        _check_labels(
            "Translator",
            "target_out",
            labels,
            layer.target_vocabulary_size,
            target.shape,
            "target_in",
        )


def check_autoencoder_batch(layer, tokens, labels=None):
    tokens = check_ids(tokens, "tokens", "Autoencoder", layer.vocabulary_size)
    if labels is not None:
        _check_labels(
            "Autoencoder",
            "labels",
            labels,
            layer.vocabulary_size,
            tokens.shape,
            "tokens",
        )


def _check_labels(owner, name, labels, vocabulary_size, shape, against):
    array = to_numpy(labels)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    array = check_ids(array, name, owner, vocabulary_size, "(batch, t)")
    if array.shape != tuple(shape):
        raise ValueError(
            f"{owner}: {name} must have the shape of {against} "
            f"{tuple(shape)}; got {array.shape}."
        )


def check_attention_inputs(owner, x, context, context_mask, ids=None):
    """`Decoder`'s (`ids`: its vocabulary size) or `CrossAttention`'s `x`,
    `context` and `context_mask`, each when not `None`."""
    batch = None
    if x is not None:
        if ids is not None:
            batch = len(check_ids(x, "x", owner, ids, "(batch, t)"))
        else:
            batch = check_float(x, "x", owner, "(batch, t, dim)")[0]
    if context is not None:
        shape = check_float(context, "context", owner, "(batch, s, units)")
        if batch is not None:
            check_same_batch(owner, "context", "x", (shape[0], batch))
        if context_mask is not None:
            check_mask(context_mask, "context_mask", owner, shape[:2])


# ------------------------------------------------------------ the guard
def guard(layer, arguments, training=None):
    """The check of a layer's `__call__`: checks `arguments` when every one
    is concrete (eager), warns once when the layer is traced in a compiled
    step that the contract hook did not check. Returns a context manager
    inside which the layer runs (its sublayers skip their checks)."""
    if inputs_checked():
        return contextlib.nullcontext()
    # Imported here: the hook builds on this module's checks.
    from kmodels.contracts import hook

    outer = keras_internals.outermost_layer()
    if outer is not None and outer is not layer:
        # Called inside a model's call (Keras builds `fit`'s model with a
        # symbolic call before its first step, and traces the step): from
        # now on that model checks the data of its entry points.
        hook.adopt(outer)
    if in_symbolic_scope():
        return contextlib.nullcontext()
    values = keras.tree.flatten(
        [v for v in arguments.values() if v is not None]
    )
    # A symbolic call (a tuple of KerasTensors for a Translator's inputs
    # too) builds a graph: there is no data to check and nothing to warn.
    if any(isinstance(v, keras.KerasTensor) for v in values):
        return contextlib.nullcontext()
    if all(is_concrete(v) for v in values):
        hook.check_not_running_elsewhere(
            layer, f"a call of {type(layer).__name__} '{layer.name}'"
        )
        check_layer(layer, arguments, training)
        return checked()
    _warn_unchecked(layer, arguments)
    return contextlib.nullcontext()


def _warn_unchecked(layer, arguments):
    # A class with its own rule (and warning) for compiled steps sets
    # `_warns_when_unchecked = False` (GrowableEmbedding: unseen ids get
    # zero vectors, nothing turns NaN). A class whose traced call checks
    # part of its contract (shapes) says what is left unchecked in
    # `_unchecked_when_traced(arguments)`: `None` when nothing is.
    if not getattr(layer, "_warns_when_unchecked", True) or getattr(
        layer, "_kmodels_warned_unchecked", False
    ):
        return
    left = getattr(layer, "_unchecked_when_traced", None)
    risk = UNCHECKED_IDS if left is None else left(arguments)
    if risk is None:
        return
    layer._kmodels_warned_unchecked = True
    warnings.warn(
        unchecked_warning(type(layer).__name__, layer.name, risk),
        stacklevel=4,
    )


# What an unchecked compiled step risks with ids, the default.
UNCHECKED_IDS = (
    "a bad id there (out of range, negative, fractional) is not refused, "
    "and on JAX gives NaN outputs and, in fit, NaN weights"
)


def unchecked_warning(kind, name, risk=UNCHECKED_IDS):
    """The one-time warning of a kmodels layer traced in a compiled step
    whose batch no contract hook checked; `risk` says what goes
    unrefused there."""
    return (
        f"kmodels {kind} '{name}' runs inside a compiled step whose inputs "
        f"kmodels did not check: {risk}. kmodels checks the batches of a "
        "functional model from the next step on (or its inputs are "
        "computed inside the model, where no check reaches them). To check "
        "the first step too, call kmodels.contracts.enforce(model) once "
        "after building the model."
    )


_SIGNATURES = {}


def guarded_call(layer, call, args, kwargs):
    """`call(*args, **kwargs)` (the layer's `keras.layers.Layer.__call__`)
    behind `guard`: the concrete arguments are checked before Keras
    converts them (JAX would cast int64 NumPy ids to int32, wrapping)."""
    cls = type(layer)
    if cls not in _SIGNATURES:
        import inspect

        _SIGNATURES[cls] = inspect.signature(layer.call)
    named = {k: v for k, v in kwargs.items() if k not in ("training", "mask")}
    try:
        arguments = _SIGNATURES[cls].bind_partial(*args, **named).arguments
    except TypeError:
        # Keras raises its own error for a call it cannot bind.
        return call(*args, **kwargs)
    with guard(layer, dict(arguments), kwargs.get("training")):
        return call(*args, **kwargs)
