"""Compiled eager calls of the seq2seq layers, cached per input signature.

An eager call of a recurrent Keras layer on JAX traces and compiles its scan
again on every call (hundreds of milliseconds, and memory that is never
given back); TensorFlow runs it op by op. When every input of an outermost
call holds data (NumPy arrays or eager tensors) and the call runs at the top
level (`kmodels.backend.compiled.may_compile_eager_call`: not inside a
`tf.function`, a JAX trace, a `keras.StatelessScope` or a functional call),
the layer's `keras.layers.Layer.__call__` runs instead as one compiled
function (`kmodels.backend.compiled.compile_reader`: `tf.function`,
`jax.jit`), traced once per signature: the inputs' structure, shapes and
dtypes, which of them carry a Keras mask, and the call's flags
(`return_state`, `training`, ...). The variables are read at call time, so
weights changed by `fit` or `set_weights` are seen without retracing. The
Keras masks of the inputs go in (a `Decoder` reads the mask `Encoder` left
on its context) and those of the outputs come back, as the uncompiled call
sets them. `fit`, `predict`, `generate` and custom training loops trace the
layers themselves and see no change; a `tf.GradientTape` differentiates
through the compiled call. torch always runs the uncompiled call.

A layer that is not built yet is built by a functional call on the
inputs' shapes and dtypes, then its call is compiled as above (an uncompiled
first call would compile each recurrent scan op by op on JAX, for seconds).
A call falls back to the uncompiled one when an input is not an array (a
Python list of ids), when it is nested in another kmodels layer's call (the
outer call is the one compiled) or when `ENABLED` is False
(`with disabled(): ...`).
"""

import collections
import contextlib
import functools
import threading
import weakref

import keras
import numpy as np

from kmodels.backend import compiled
from kmodels.backend.keras_internals import get_keras_mask
from kmodels.backend.keras_internals import set_keras_mask
from kmodels.contracts.checks import guarded_call
from kmodels.contracts.checks import inputs_checked

# The switch: False runs every call uncompiled (tests compare both paths).
ENABLED = True
# Signatures kept per layer; the least recently used one is dropped first.
MAX_SIGNATURES = 32

_STATIC = (bool, int, float, str, np.generic)


@contextlib.contextmanager
def disabled():
    """A block in which every seq2seq call runs uncompiled."""
    global ENABLED
    previous, ENABLED = ENABLED, False
    try:
        yield
    finally:
        ENABLED = previous


class LRUCache:
    """Values by key, the least recently used dropped first beyond a bound;
    safe to share between threads.

    Holds compiled functions (a layer's eager calls here, a `Translator`'s
    generation loops in `kmodels.seq2seq.decoding`): a copy of the object
    that owns one starts with an empty cache.
    """

    def __init__(self):
        self._values = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, create, max_size):
        """The value of `key`, made by `create()` when missing; then the
        least recently used keys beyond `max_size` are dropped (a smaller
        bound applies at the next call). Under the cache's lock: threads
        asking for a new key share one value."""
        with self._lock:
            value = self._values.get(key)
            if value is None:
                value = self._values[key] = create()
            else:
                self._values.move_to_end(key)
            while len(self._values) > max_size:
                self._values.popitem(last=False)
            return value

    def __len__(self):
        return len(self._values)

    def __contains__(self, key):
        return key in self._values

    def clear(self):
        with self._lock:
            self._values.clear()

    def __deepcopy__(self, memo):
        return type(self)()

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__()


class _Cache:
    """A layer's compiled calls, by signature, and how often it traced."""

    def __init__(self):
        self.functions = LRUCache()
        self.traces = 0


# Kept beside the layers, not on them (a layer keeps no new attribute, and a
# copied or saved layer has no cache); the compiled functions hold the
# layer's variables and a weak reference to its `__call__` only, so a layer
# nobody else holds is freed with its cache.
_CACHES = weakref.WeakKeyDictionary()


def _cache(layer):
    cache = _CACHES.get(layer)
    if cache is None:
        cache = _CACHES[layer] = _Cache()
    return cache


def trace_count(layer):
    """How many times `layer`'s compiled eager calls were traced."""
    return _cache(layer).traces


def signature_count(layer):
    """How many signatures `layer` holds compiled calls for."""
    return len(_cache(layer).functions)


def clear(layer):
    """Drops `layer`'s compiled eager calls."""
    _cache(layer).functions.clear()


def eager_call(layer, call):
    """`call` (the layer's `keras.layers.Layer.__call__`), compiled per
    input signature when the call allows it (see the module docstring).

    Decided before the layer's contract check opens its `checked()` scope:
    a call made inside another kmodels layer's call is not compiled on its
    own.
    """
    if not ENABLED or inputs_checked():
        return call
    return functools.partial(_call, layer, call)


def _is_array(value):
    return isinstance(value, np.ndarray) or keras.ops.is_tensor(value)


def _split(args, kwargs):
    """`(static, dynamic)`: the flags as they are, and the array inputs as
    `(index, structure, leaves)`; None when an input is neither."""
    items = list(enumerate(args)) + sorted(kwargs.items())
    static, dynamic = [], []
    for key, value in items:
        if value is None or isinstance(value, _STATIC):
            static.append((key, type(value).__name__, value))
            continue
        leaves = keras.tree.flatten(value)
        if not leaves or not all(_is_array(leaf) for leaf in leaves):
            return None
        dynamic.append((key, value, leaves))
    return static, dynamic


def _call(layer, call, *args, **kwargs):
    split = _split(args, kwargs)
    if split is None:
        return call(*args, **kwargs)
    if not layer.built:
        # Built by a functional call on the inputs' specs: a first eager
        # call would run the layers uncompiled (on JAX it compiles every
        # recurrent scan op by op: seconds), only to be traced again.
        _build_symbolically(call, args, kwargs)
    static, dynamic = split
    leaves = [
        keras.ops.convert_to_tensor(leaf)
        if isinstance(leaf, np.ndarray)
        else leaf
        for _, _, group in dynamic
        for leaf in group
    ]
    if not compiled.may_compile_eager_call(leaves):
        return call(*args, **kwargs)
    masks = [get_keras_mask(leaf) for leaf in leaves]
    present = [m for m in masks if m is not None]
    if not compiled.may_compile_eager_call(present):
        return call(*args, **kwargs)
    key = (
        tuple(static),
        tuple(
            (k, repr(keras.tree.map_structure(lambda _: 0, v)))
            for k, v, _ in dynamic
        ),
        tuple(_spec(leaf) for leaf in leaves),
        tuple(None if m is None else _spec(m) for m in masks),
        layer.dtype_policy.name,
        len(layer.variables),
    )
    function = _cache(layer).functions.get(
        key,
        lambda: _compile(layer, call, args, kwargs, dynamic, masks),
        MAX_SIGNATURES,
    )
    outputs, output_masks = function(*leaves, *present)
    for tensor, mask in zip(keras.tree.flatten(outputs), output_masks):
        if mask is not None:
            set_keras_mask(tensor, mask)
    return outputs


def _build_symbolically(call, args, kwargs):
    def symbolic(value):
        if not _is_array(value):
            return value
        return keras.KerasTensor(
            value.shape, keras.backend.standardize_dtype(value.dtype)
        )

    call(
        *keras.tree.map_structure(symbolic, list(args)),
        **keras.tree.map_structure(symbolic, dict(kwargs)),
    )


def _spec(tensor):
    return (
        tuple(int(d) for d in tensor.shape),
        keras.backend.standardize_dtype(tensor.dtype),
    )


def _compile(layer, call, args, kwargs, dynamic, masks):
    """The compiled `call` for one signature: it takes the array inputs,
    then the masks present, and returns the outputs and their masks."""
    args = list(args)
    kwargs = dict(kwargs)
    sizes = [len(group) for _, _, group in dynamic]
    has_mask = [m is not None for m in masks]
    # Only the structures are kept: no input array stays alive in the cache.
    templates = [
        (k, keras.tree.map_structure(lambda _: 0, v)) for k, v, _ in dynamic
    ]
    for k, _ in templates:
        if isinstance(k, int):
            args[k] = None
        else:
            kwargs[k] = None
    cache = _cache(layer)
    call = weakref.WeakMethod(call)

    def run(*flat):
        cache.traces += 1
        leaves, present = list(flat[: sum(sizes)]), list(flat[sum(sizes) :])
        for leaf, masked in zip(leaves, has_mask):
            if masked:
                set_keras_mask(leaf, present.pop(0))
        call_args, call_kwargs = list(args), dict(kwargs)
        start = 0
        for (k, template), size in zip(templates, sizes):
            value = keras.tree.pack_sequence_as(
                template, leaves[start : start + size]
            )
            start += size
            if isinstance(k, int):
                call_args[k] = value
            else:
                call_kwargs[k] = value
        outputs = call()(*call_args, **call_kwargs)
        output_masks = [get_keras_mask(t) for t in keras.tree.flatten(outputs)]
        return outputs, output_masks

    return compiled.compile_reader(run, layer.variables)


class CheckedEagerCall:
    """The `__call__` of the seq2seq layers and models (put first among the
    bases): the concrete inputs are checked before Keras converts them
    (JAX casts int64 NumPy ids to int32, wrapping; `kmodels.contracts`),
    then an eager call runs compiled, traced once per input signature
    (`eager_call`)."""

    def __call__(self, *args, **kwargs):
        call = eager_call(self, super().__call__)
        return guarded_call(self, call, args, kwargs)
