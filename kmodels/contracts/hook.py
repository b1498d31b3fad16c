"""The contract hook of compiled `fit`, `evaluate`, `predict` and
`*_on_batch`.

Two places check the data, both before any compiled step sees it:

- the entry points (`fit`, `evaluate`, `predict`, `train_on_batch`,
  `test_on_batch`, `predict_on_batch`) check their whole `x` (and `y`)
  when they are arrays (NumPy or backend tensors, possibly nested), once,
  before Keras converts anything: an empty `(0, s)` batch, which runs no
  step at all, and int64 ids that JAX would wrap to int32 are caught there;
- the model's train, test and predict functions check each batch they are
  about to consume (data sets, generators): a `kmodels.backend.steps`
  hook, the first of each step.

kmodels' own models have both by construction (`ContractModel`); a user's
`keras.Model` gets them from `enforce`, which kmodels calls by itself the
first time one of its layers runs inside the model's call (`adopt`).

The entry points of one model run one thread at a time
(`running`): JAX's trainer holds the model's variables outside the model
while an entry point runs, so a call from another thread would read no
weights, or take them away from the running one.
"""

import contextlib
import contextvars
import functools
import inspect
import threading
import weakref

import keras
import numpy as np

from kmodels.backend import keras_internals
from kmodels.backend import steps
from kmodels.backend.contracts import local_numpy
from kmodels.backend.contracts import processes_refusing
from kmodels.backend.replicas import in_replica_function
from kmodels.contracts import checks
from kmodels.contracts.structure import path_to

_KINDS = ("train", "test", "predict")
_ENTRY_POINTS = (
    "fit",
    "evaluate",
    "predict",
    "train_on_batch",
    "test_on_batch",
    "predict_on_batch",
)


def _is_array(value):
    return isinstance(value, (np.ndarray, np.generic)) or (
        keras.ops.is_tensor(value) and checks.is_concrete(value)
    )


def _are_arrays(*values):
    leaves = [
        leaf
        for value in values
        if value is not None
        for leaf in keras.tree.flatten(value)
    ]
    return bool(leaves) and all(
        leaf is None or _is_array(leaf) for leaf in leaves
    )


# The models (by `id`) whose entry point, in this thread or task, checked
# all of its data up front: their steps skip the per-batch check. Per
# context, so that another thread's call of the same model is checked.
_PRECHECKED = contextvars.ContextVar("kmodels_prechecked", default=frozenset())


@contextlib.contextmanager
def _prechecked(model, checked):
    """A scope in which `model`'s steps skip (`checked`) or run the
    per-batch check: each entry point decides for its own steps, also when
    it runs inside another one (the validation `evaluate` of `fit`)."""
    ids = _PRECHECKED.get()
    token = _PRECHECKED.set(ids | {id(model)} if checked else ids - {id(model)})
    try:
        yield
    finally:
        _PRECHECKED.reset(token)


# ------------------------------------------------- one thread per model
class _Run:
    """An entry point of a model, running in one thread."""

    def __init__(self, model, entry):
        self.thread = threading.current_thread()
        self.model = f"{type(model).__name__} '{model.name}'"
        self.entry = entry
        self.depth = 0


# The model and each kmodels layer inside it -> its `_Run`, while an entry
# point of the model runs.
_RUNS = weakref.WeakKeyDictionary()
_RUNS_LOCK = threading.Lock()


def _members(model):
    """`model` and the kmodels layers it holds (a layer called on its own
    reads the same variables)."""
    return [model] + [
        layer
        for layer in keras_internals.sublayers(model)
        if type(layer).__module__.startswith("kmodels.")
    ]


def _refuse_concurrent(run, what):
    raise RuntimeError(
        f"{run.model} is running `{run.entry}` in thread "
        f"'{run.thread.name}'; {what} from thread "
        f"'{threading.current_thread().name}' is refused: an entry point "
        "(fit, evaluate, predict, *_on_batch) holds the model's weights "
        "while it runs (outside the model on JAX). Call it once that one "
        "returns, from that thread (a callback), or on a copy of the model "
        "per thread (keras.models.clone_model, then set_weights)."
    )


@contextlib.contextmanager
def running(model, entry):
    """Marks `model`'s entry point `entry` as running in this thread while
    the block runs (nested entry points of the same thread, such as the
    validation `evaluate` of `fit`, are fine); raises a `RuntimeError`,
    before anything runs, when another thread runs one."""
    me = threading.current_thread()
    members = _members(model)
    with _RUNS_LOCK:
        for member in members:
            run = _RUNS.get(member)
            if run is not None and run.thread is not me:
                _refuse_concurrent(
                    run, f"`{entry}` of {type(model).__name__} '{model.name}'"
                )
        runs = []
        for member in members:
            run = _RUNS.get(member)
            if run is None:
                run = _RUNS[member] = _Run(model, entry)
            run.depth += 1
            runs.append((member, run))
    try:
        yield
    finally:
        with _RUNS_LOCK:
            for member, run in runs:
                run.depth -= 1
                if not run.depth and _RUNS.get(member) is run:
                    del _RUNS[member]


def check_not_running_elsewhere(layer, what):
    """Raises the `RuntimeError` of `running` when an entry point of a model
    holding `layer` (a kmodels layer or model) runs in another thread:
    `what` (e.g. "a call of Encoder 'encoder'") would read its weights."""
    run = _RUNS.get(layer)
    if (
        run is not None
        and run.thread is not threading.current_thread()
        # A `tf.distribute` step runs each replica in a thread of its own.
        and not in_replica_function()
    ):
        _refuse_concurrent(run, what)


def _entry(model, name, x, y, training):
    """The scope of a call of an entry point: marks it running, checks its
    arrays; the steps inside skip the per-batch check when it did."""
    stack = contextlib.ExitStack()
    with stack:
        stack.enter_context(running(model, name))
        arrays = _are_arrays(x, y)
        if arrays:
            _check_in_every_process(model, x, y, training)
        stack.enter_context(_prechecked(model, arrays))
        return stack.pop_all()


def _check_in_every_process(model, x, y, training):
    """`model._kmodels_check_batch` on this process's part of a batch; with
    several processes (JAX), every process then learns whether another
    refused its part, and raises too: a process that went on would wait
    for the refusing one in the step's collectives forever."""
    try:
        model._kmodels_check_batch(x, y, training)
    except Exception:
        processes_refusing(True)
        raise
    refusing = processes_refusing(False)
    if refusing:
        raise ValueError(
            f"kmodels: process {', '.join(map(str, refusing))} refused its "
            f"part of the batch of model '{model.name}' (its own error "
            "says why); this process's part passed the checks. Nothing "
            "ran in any process."
        )


class _ContractHook(steps.StepHook):
    """Checks the batches of each compiled step of a model against the
    contracts of its kmodels layers, first of the model's step hooks; the
    step then runs inside `checks.checked()` (the layers skip their own
    checks)."""

    order = 0
    key = "kmodels.contracts"

    def before_step(self, step):
        model = step.model
        if id(model) in _PRECHECKED.get():
            return
        for batch in step.batches:
            # As NumPy: a batch split between replicas or processes is
            # read where it lies (`local_numpy`).
            x, y, _ = keras.utils.unpack_x_y_sample_weight(
                keras.tree.map_structure(_local, batch)
            )
            _check_in_every_process(model, x, y, step.training)

    def scope(self):
        return checks.checked()


def _local(value):
    return None if value is None else local_numpy(value)


def install_step_hook(model, kind):
    steps.add_hook(model, kind, _ContractHook())


class ContractModel(keras_internals.BuildWithoutData):
    """Mixin of kmodels' own models: every compiled entry point checks its
    data with `self.check_batch(x, y, training)` before any step runs.

    A model that knows its batches' specs returns them from `_batch_spec()`
    (`keras_internals.BuildWithoutData`): Keras then builds its loss and
    metrics without reading a batch first, so a `PyDataset` with workers
    trains every batch once, in order, on every backend."""

    def _kmodels_check_batch(self, x, y, training):
        self.check_batch(x, y, training)

    def make_train_function(self, force=False):
        self._build_before_tracing()
        super().make_train_function(force)
        install_step_hook(self, "train")
        return self.train_function

    def make_test_function(self, force=False):
        self._build_before_tracing()
        super().make_test_function(force)
        install_step_hook(self, "test")
        return self.test_function

    def make_predict_function(self, force=False):
        super().make_predict_function(force)
        install_step_hook(self, "predict")
        return self.predict_function

    def fit(self, x=None, y=None, *args, **kwargs):
        with _entry(self, "fit", x, y, True):
            return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        with _entry(self, "evaluate", x, y, False):
            return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        with _entry(self, "predict", x, None, False):
            return super().predict(x, *args, **kwargs)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        with _entry(self, "train_on_batch", x, y, True):
            return super().train_on_batch(x, y, *args, **kwargs)

    def test_on_batch(self, x, y=None, *args, **kwargs):
        with _entry(self, "test_on_batch", x, y, False):
            return super().test_on_batch(x, y, *args, **kwargs)

    def predict_on_batch(self, x):
        with _entry(self, "predict_on_batch", x, None, False):
            return super().predict_on_batch(x)


# ------------------------------------------------ user functional models
def enforce(model):
    """Makes `model`'s compiled entry points check their data against the
    contracts of the kmodels layers it contains.

    One line for a functional `keras.Model` built from kmodels layers
    (kmodels' own models, `Translator` and `Autoencoder`, need none):

    ```python
    model = kmodels.contracts.enforce(keras.Model(inputs, outputs))
    ```

    From then on `fit`, `evaluate`, `predict`, `train_on_batch`,
    `test_on_batch` and `predict_on_batch` check, before any compiled
    step, the inputs that reach a kmodels layer straight from the model's
    inputs (`Encoder` tokens, `Decoder` ids and masks, `PositionalEmbedding`
    ids, `PatchEmbedding` images, `GrowableEmbedding` ids), with the same
    exceptions as the eager calls of those layers, on every backend. A
    refused call changes no weight and no optimizer variable. Training a
    model that calls a `GrowableEmbedding` more than once is refused (its
    sparse update runs once per call). The entry points run one thread at
    a time (a call from another thread while one runs raises a
    `RuntimeError`). Returns `model`; calling it twice is harmless.

    kmodels calls it by itself the first time one of its layers runs
    inside the model's call; calling it right after building the model
    checks the model's very first compiled step too (see
    `docs/reliability.md`).
    """
    if isinstance(model, ContractModel) or getattr(
        model, "_kmodels_enforced", False
    ):
        return model
    entries = _functional_entries(model)
    # Layers whose training call has a side effect that runs once per
    # call (`GrowableEmbedding`'s sparse update): called twice in the
    # graph, the model would apply it twice in one step.
    repeated = [
        layer._repeated_call_error(f"{calls} times in model '{model.name}'")
        for layer in keras_internals.sublayers(model)
        if hasattr(layer, "_repeated_call_error")
        and (calls := keras_internals.calls_in_graph(model, layer)) > 1
    ]

    def check_batch(x, y, training):
        if training and repeated:
            raise ValueError(repeated[0])
        for layer, located in entries:
            arguments = {}
            for name, locate in located.items():
                try:
                    arguments[name] = locate(x)
                except (KeyError, IndexError, TypeError):
                    continue
            checks.check_layer(layer, arguments, training)

    cls = type(model)

    def make(kind):
        base = getattr(cls, f"make_{kind}_function")

        def make_function(force=False):
            base(model, force)
            install_step_hook(model, kind)
            return getattr(model, f"{kind}_function")

        return make_function

    methods = {f"make_{kind}_function": make(kind) for kind in _KINDS}
    methods["_kmodels_check_batch"] = check_batch

    def entry(name, training, takes_y=True):
        base = getattr(cls, name)

        @functools.wraps(base)
        def method(x=None, y=None, *args, **kwargs):
            with _entry(model, name, x, y if takes_y else None, training):
                if takes_y:
                    return base(model, x, y, *args, **kwargs)
                if y is not None:
                    args = (y,) + args
                return base(model, x, *args, **kwargs)

        return method

    methods.update(
        fit=entry("fit", True),
        evaluate=entry("evaluate", False),
        predict=entry("predict", False, takes_y=False),
        train_on_batch=entry("train_on_batch", True),
        test_on_batch=entry("test_on_batch", False),
        predict_on_batch=entry("predict_on_batch", False, takes_y=False),
    )
    keras_internals.override_methods(model, methods)
    # Functions made before this call: wrap them now.
    for kind in _KINDS:
        install_step_hook(model, kind)
    model._kmodels_enforced = True
    return model


def adopt(model):
    """`enforce(model)` unless `model` checks its data already: called by
    a kmodels layer that runs inside `model`'s call (the outermost model of
    the call, `kmodels.backend.keras_internals.outermost_layer`)."""
    if isinstance(model, keras.Model) and not _checks_itself(model):
        enforce(model)


def _checks_itself(model):
    return isinstance(model, ContractModel) or getattr(
        model, "_kmodels_enforced", False
    )


def _is_kmodels(layer):
    return type(layer).__module__.startswith("kmodels.")


def _functional_entries(model):
    """`[(layer, {argument: locate(x)})]` for the kmodels layers of a
    functional model (or a `keras.Sequential`) whose arguments come
    straight from its inputs, also inside functional models it calls on
    them."""
    if isinstance(model, keras.Sequential):
        first = model.layers[:1]
        if first and _is_kmodels(first[0]):
            return [(first[0], {"inputs": lambda x: x})]
        return []
    struct = keras_internals.inputs_struct(model)
    entries = []
    if struct is None:
        return entries
    for layer in model.layers:
        nested = not _is_kmodels(layer) and isinstance(layer, keras.Model)
        if not (_is_kmodels(layer) or nested):
            continue
        for node in keras_internals.inbound_nodes(layer):
            arguments = node.arguments
            if nested:
                entries.extend(_nested_entries(layer, arguments, struct))
                continue
            try:
                bound = inspect.signature(layer.call).bind_partial(
                    *arguments.args, **arguments.kwargs
                )
            except TypeError:
                continue
            located = {}
            for name, value in bound.arguments.items():
                if isinstance(value, keras.KerasTensor):
                    path = path_to(struct, value)
                    if path is not None:
                        located[name] = path
                elif isinstance(value, (int, np.integer)) and not isinstance(
                    value, bool
                ):
                    located[name] = lambda x, v=value: v
            if any(
                isinstance(bound.arguments.get(n), keras.KerasTensor)
                for n in located
            ):
                entries.append((layer, located))
    return entries


def _nested_entries(inner, arguments, struct):
    """The entries of a model `inner` called (with `arguments`) inside a
    functional model whose inputs are shaped as `struct`: located in the
    outer inputs when every input of `inner` comes straight from them."""
    if not arguments.args:
        return []
    paths = keras.tree.map_structure(
        lambda t: path_to(struct, t), arguments.args[0]
    )
    if any(p is None for p in keras.tree.flatten(paths)):
        return []

    def inner_inputs(x):
        return keras.tree.map_structure(lambda p: p(x), paths)

    return [
        (
            layer,
            {
                name: (lambda x, f=locate: f(inner_inputs(x)))
                for name, locate in located.items()
            },
        )
        for layer, located in _functional_entries(inner)
    ]
