"""Hooks that run before each compiled step of a model: one mechanism.

kmodels needs to see the concrete batches a compiled `fit`, `evaluate` or
`predict` step is about to consume, before the step runs: the input
contracts check them (`kmodels.contracts`), and the growth of
`GrowableEmbedding` tables reads their ids (`kmodels.growable`). Both are
`StepHook`s; each model keeps, per kind of step (`"train"`, `"test"`,
`"predict"`), one ordered list of hooks, and one wrapper of the step
function Keras made (`model.train_function`...):

    hook = MyHook()                      # a `StepHook`
    steps.add_hook(model, "train", hook)
    ...
    steps.remove_hook(model, "train", hook)

Before each step the wrapper takes the batches of one execution
(`steps_per_execution` of them), calls `hook.before_step(step)` for each
hook in `order`, then runs Keras' step on the same batches inside every
hook's `scope()`. A hook that raises stops the step; on JAX the model's
state is then written back to its variables, where Keras' trainer had
taken it out, bit-identical. What differs per backend (the step
function's signature, where the state lies while an epoch runs, when a
step must be traced again) lives in `kmodels.backend.<backend>.steps`.

`add_hook` wraps the step function Keras has made (`fit` makes it before
`on_train_begin`). When Keras makes one later (the hook was added before,
the model is compiled again, `make_train_function(force=True)`),
`sync(model, kind)` wraps it: kmodels' models and the models `enforce`d by
`kmodels.contracts` call it from their `make_*_function`. (Making a step
function early is not harmless: on JAX it fixes the shardings of the
optimizer's variables, which may not exist yet.)
"""

import threading

from kmodels.backend import keras_internals
from kmodels.backend import native
from kmodels.backend.common.steps import Step
from kmodels.backend.common.steps import StepHook
from kmodels.backend.common.steps import Wrapper

__all__ = [
    "Step",
    "StepHook",
    "add_hook",
    "hooks",
    "keras_step_function",
    "rebuild",
    "remove_hook",
    "sync",
]

KINDS = ("train", "test", "predict")

# Each model holds its wrappers, `{kind: Wrapper}`, in a plain attribute
# (not tracked by Keras): they hold Keras' step functions, which hold the
# model, so a table outside the model would keep it alive.
_ATTRIBUTE = "_kmodels_step_wrappers"
_LOCK = threading.RLock()


def _wrappers(model):
    return model.__dict__.get(_ATTRIBUTE, {})


def _wrapper(model, kind):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}.")
    by_kind = model.__dict__.get(_ATTRIBUTE)
    if by_kind is None:
        by_kind = {}
        object.__setattr__(model, _ATTRIBUTE, by_kind)
    if kind not in by_kind:
        by_kind[kind] = Wrapper(model, kind)
    return by_kind[kind]


def sync(model, kind):
    """Wraps `model.<kind>_function` when it is a step function Keras made
    since the last call (and the model has hooks of that kind)."""
    with _LOCK:
        wrapper = _wrappers(model).get(kind)
        if wrapper is None or not wrapper.hooks:
            return
        current = getattr(model, f"{kind}_function")
        if current is None or current is wrapper.function:
            return
        wrapper.original = current
        if wrapper.function is None:
            wrapper.function = native.steps.wrap(wrapper)
        keras_internals.set_step_function(model, kind, wrapper.function)


def add_hook(model, kind, hook):
    """Adds `hook` to the hooks run before each `kind` step of `model`
    (replacing a hook with the same `key`), and wraps the model's current
    step function."""
    with _LOCK:
        wrapper = _wrapper(model, kind)
        hooks = [
            h
            for h in wrapper.hooks
            if h is not hook and (hook.key is None or h.key != hook.key)
        ]
        hooks.append(hook)
        # Stable: hooks of one order run in the order they were added.
        wrapper.hooks = sorted(hooks, key=lambda h: h.order)
        sync(model, kind)


def remove_hook(model, kind, hook):
    """Removes `hook`; the last one out puts Keras' step function back."""
    with _LOCK:
        wrapper = _wrappers(model).get(kind)
        if wrapper is None or hook not in wrapper.hooks:
            return
        wrapper.hooks = [h for h in wrapper.hooks if h is not hook]
        if wrapper.hooks:
            return
        if getattr(model, f"{kind}_function") is wrapper.function:
            keras_internals.set_step_function(model, kind, wrapper.original)


def hooks(model, kind):
    """The hooks of `model`'s `kind` steps, in the order they run."""
    with _LOCK:
        wrapper = _wrappers(model).get(kind)
        return [] if wrapper is None else list(wrapper.hooks)


def keras_step_function(model, kind):
    """The step function Keras made for `model`'s `kind` steps (the one
    the hooks wrap, when they do)."""
    with _LOCK:
        current = getattr(model, f"{kind}_function")
        wrapper = _wrappers(model).get(kind)
        if wrapper is not None and current is wrapper.function:
            return wrapper.original
        return current


def rebuild(model, kind):
    """Has Keras make `model`'s `kind` step function again (a compiled
    form specialised on the old shapes or constants), and wraps it."""
    getattr(model, f"make_{kind}_function")(force=True)
    sync(model, kind)
