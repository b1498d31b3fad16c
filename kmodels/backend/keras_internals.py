"""The Keras internals kmodels relies on, each behind one function.

Keras 3 offers no public way to do what these functions do; each says why
kmodels needs it. This module (with its per-backend halves,
`kmodels/backend/<backend>/keras_internals.py`) is the only place under
`kmodels/` that names `keras.src` or a private Keras or keras-hub
attribute: `backends_tests/keras_internals_lint_test.py` fails, naming the
file and line, on any other.

- `outermost_layer`: the layer whose call the current call runs inside
  (on JAX, also the model whose `stateless_call` runs it).
- `sublayers`: every layer inside a layer, recursively.
- `inputs_struct`, `inbound_nodes`, `calls_in_graph`: a functional
  model's input structure and the calls of its graph.
- `in_stateless_scope`, `in_symbolic_scope`: the scope a call runs in.
- `ask_to_proceed_with_overwrite`: Keras' overwrite prompt.
- `is_backend_optimizer_module`: the module path of the per-backend
  optimizer classes (torch's Adam) a saved compile config records.
- `AutoJitCompileHook`: a model mixin that may turn XLA on where Keras'
  `jit_compile="auto"` would not.
- `BuildWithoutData`: a model mixin that builds the loss and metrics from
  known batch specs, without reading the data.
- `get_keras_mask`, `set_keras_mask`: the mask a tensor carries.
- `compute_output_spec`: a function's output specs, traced by the backend.
- `mean_loss`: a per-example Keras loss function as a `keras.losses.Loss`.
- `run_sampler_loop`, `sampler_loop_results`: a keras-hub sampler's loop,
  run by the caller, and its final variables.
- `learning_rate_or_schedule`: the learning rate an optimizer was given
  (a schedule object, not its current value).
- `variable_storage`, `set_variable_storage`, `set_variable_shape`: the
  backend object behind a Keras variable, replaced when a table grows.
- `loss_dtype_policy`: the dtype policy of a loss, for its config.
- `take_inputs_as_given`: a data-pipeline layer's inputs, unconverted.
- `set_step_function`, `drop_step_functions`, `override_methods`: the
  only writes of a method or a step function on a model instance (the
  step hooks of `kmodels.backend.steps`, growth, `enforce`).

The internals were checked against the versions in `CHECKED_VERSIONS`
(major.minor). Under a newer Keras or keras-hub, importing this module
warns once (`check_versions`), naming the functions that may break;
`backends_tests/keras_internals_test.py` pins each function's behaviour
and fails when the installed versions are not the checked ones, so that
the pin is re-checked when the environment moves on.
"""

import copy
import importlib.metadata
import inspect
import re
import sys
import warnings

import keras
from keras.src import backend as _backend
from keras.src.backend.common import global_state
from keras.src.backend.common import stateless_scope
from keras.src.backend.common import symbolic_scope
from keras.src.losses.losses import LossFunctionWrapper
from keras.src.trainers.trainer import model_supports_jit
from keras.src.utils import io_utils

# The versions (major.minor) whose internals this module and its
# per-backend halves were checked against.
CHECKED_VERSIONS = {"keras": "3.15", "keras-hub": "0.32"}
# The module path under which Keras keeps each backend's own optimizer
# classes (`<prefix>torch.optimizers.torch_adam`).
_BACKEND_OPTIMIZERS = "keras.src.backend."


def outermost_layer():
    """The layer (often a model) whose `__call__` the current call runs
    inside, or `None` outside any layer call.

    Keras keeps one call context per thread while a layer is called, with
    the layer that opened it (the outermost one): a kmodels layer traced in
    a compiled step of a user's functional model learns the model from it
    (`kmodels.contracts` installs its input checks there).
    """
    context = global_state.get_global_attribute("current_call_ctx")
    entry = getattr(context, "entry_layer", None)
    if (
        isinstance(entry, keras.Model)
        or not stateless_scope.in_stateless_scope()
    ):
        return entry
    return _stateless_caller() or entry


def _stateless_caller():
    """The outermost model whose `stateless_call` the current call runs
    inside, or `None`.

    JAX's trainers run a model's step through `model.stateless_call`, which
    calls `model.call` without opening a call context: a plain functional
    model whose first call is `predict` (or `predict_on_batch`) would name
    no model to its kmodels layers. Keras offers no public way to learn the
    model from inside; its frame on the stack is the one trace left.
    """
    code = inspect.unwrap(keras.layers.Layer.stateless_call).__code__
    found = None
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is code:
            caller = frame.f_locals.get("self")
            if isinstance(caller, keras.Model):
                found = caller
        frame = frame.f_back
    return found


def sublayers(layer):
    """Every layer inside `layer`, at any depth, each once (not `layer`).

    `keras.Model.layers` lists the direct children only; Keras' own
    recursive walk is private.
    """
    return layer._flatten_layers(include_self=False)


def inputs_struct(model):
    """The nested structure of a functional model's `keras.Input`s (as the
    model takes them), or `None` for other models.

    `model.inputs` is flat; kmodels finds where a layer's argument sits in
    the data a model is given (`kmodels.contracts`).
    """
    return getattr(model, "_inputs_struct", None)


def inbound_nodes(layer):
    """The calls of `layer` in the functional graphs built so far: each has
    `.arguments` (`.args`, `.kwargs`: the symbolic tensors it was called
    on). Keras keeps them on the layer, privately."""
    return getattr(layer, "_inbound_nodes", [])


def calls_in_graph(model, layer):
    """How many times `layer` is called in the functional graph of `model`
    (0 for other models). Keras lists a functional model's calls by depth,
    privately; a layer's own list of calls spans every graph it is in."""
    by_depth = getattr(model, "_nodes_by_depth", None)
    if not isinstance(by_depth, dict):
        return 0
    return sum(
        1
        for nodes in by_depth.values()
        for node in nodes
        if node.operation is layer
    )


def in_stateless_scope():
    """Whether the current call runs inside Keras' `StatelessScope` (JAX's
    compiled steps, `stateless_call`): variables are read from the scope
    and must not be assigned. Keras exports the scope, not the test."""
    return stateless_scope.in_stateless_scope()


def in_symbolic_scope():
    """Whether Keras is tracing a call symbolically (building a functional
    model or computing an output spec): there is no data to check. Keras
    exports no test for it."""
    return symbolic_scope.in_symbolic_scope()


def ask_to_proceed_with_overwrite(path):
    """Asks on the terminal whether to overwrite `path`, as Keras' own
    `save(..., overwrite=False)` does; True to proceed. Keras exports the
    option, not its prompt."""
    return io_utils.ask_to_proceed_with_overwrite(path)


def is_backend_optimizer_module(module):
    """Whether `module` (the `"module"` entry of a serialized optimizer)
    is where Keras keeps one backend's own optimizer classes: on torch,
    `keras.optimizers.Adam` becomes such a class, which a saved compile
    config records. Keras exports those classes under no public name."""
    return isinstance(module, str) and module.startswith(_BACKEND_OPTIMIZERS)


class AutoJitCompileHook:
    """Mixin of a `keras.Model` (before it in the bases) whose
    `jit_compile="auto"` may mean XLA where Keras' own choice is not to.

    `_xla_when_auto()` returns True to ask for XLA: granted unless the
    model runs under a `tf.distribute` strategy or one of its layers does
    not support XLA (Keras' own tests); False leaves the choice to Keras.
    Keras resolves "auto" in a private `Model` method, with no public hook:
    this overrides it.
    """

    def _xla_when_auto(self):
        return False

    def _resolve_auto_jit_compile(self):
        if (
            self._xla_when_auto()
            and not getattr(self, "_distribute_strategy", None)
            and model_supports_jit(self)
        ):
            return True
        return super()._resolve_auto_jit_compile()


class BuildWithoutData:
    """Mixin of a `keras.Model` (before it in the bases) that builds its
    loss and metrics from the specs of a batch it knows, without reading
    the data.

    On JAX and torch, Keras' first `fit` (and `evaluate`) after `compile`
    reads one batch to build the loss and metrics, then restarts the data.
    A `keras.utils.PyDataset` with workers keeps the batches its workers
    had already queued: the epoch trains those first (and again later) and
    never reaches its last ones (Keras 3.15; TensorFlow builds inside its
    first step and reads nothing). `_batch_spec()` returns `(x, y)` as
    `keras.KerasTensor`s (or `None`: Keras reads a batch, as before); the
    build then reads no data. Keras does it in a private `Trainer` method,
    with no public hook: this overrides it.
    """

    def _batch_spec(self):
        return None

    def _symbolic_build(self, iterator=None, data_batch=None):
        if data_batch is None:
            data_batch = self._batch_spec()
        return super()._symbolic_build(iterator=iterator, data_batch=data_batch)

    def _build_before_tracing(self):
        """Builds the model, loss, metrics and optimizer from
        `_batch_spec()` before a step function is first traced.

        Without a distribution strategy, TensorFlow's trainer leaves that
        build to the first trace of the step (Keras 3.15
        `_maybe_symbolic_build`); `tf.function`, seeing variables created
        there, traces the step a second time: two traces of the whole train
        step on a model's first `fit`. Built first, it is traced once. JAX
        and torch build in `fit` already: a no-op there."""
        spec = self._batch_spec()
        if spec is not None:
            self._symbolic_build(data_batch=spec)


def get_keras_mask(x):
    """The Keras mask tensor `x` carries, or `None`. Keras attaches masks
    to tensors privately and exports no reader."""
    return _backend.get_keras_mask(x)


def set_keras_mask(x, mask):
    """Attaches `mask` to tensor `x` as its Keras mask (`None` removes
    it), as a masking layer's call does. Keras exports no writer."""
    _backend.set_keras_mask(x, mask)


def compute_output_spec(fn, *args, **kwargs):
    """The output specs (`keras.KerasTensor`s) of `fn(*args, **kwargs)` on
    `keras.KerasTensor` arguments, traced by the backend (`jax.eval_shape`,
    a TensorFlow graph, torch meta tensors) without running it. Keras
    exports it as a method of layers and operations only, which trace
    their own `call`."""
    return _backend.compute_output_spec(fn, *args, **kwargs)


def mean_loss(fn):
    """A `keras.losses.Loss` averaging the per-example values of Keras loss
    function `fn` (`keras.losses.get("mse")`), with the ranks of targets
    and predictions matched as `compile` does. Keras' wrapper class is
    private."""
    return LossFunctionWrapper(fn, name=fn.__name__)


def run_sampler_loop(
    sampler, loop, next, prompt, log_probabilities=False, **kwargs
):
    """Runs keras-hub `sampler` as `sampler(next, prompt, **kwargs)` with
    `loop(cond, body, initial, maximum_iterations)` as its while loop, and
    returns the loop's final variables (`sampler_loop_results` reads them).

    With `log_probabilities`, `next` returns log-probabilities that need
    not sum to one (constrained candidates at `-inf`): the copy's
    `compute_probabilities` (keras-hub's public hook, a softmax at its
    temperature) is their `exp`, so that beam search ranks by them as
    they are, not renormalised over the allowed ids.

    `sampler` is not modified: a shallow copy of it runs. keras-hub
    samplers return only the ids (the cache is dropped) and run their loop
    on their own random state; `Sampler.run_loop`, the hook they call, is
    undocumented: this overrides it on the copy.
    """
    sampler = copy.copy(sampler)
    final = []

    def run_loop(
        cond, body, model=None, loop_vars=None, maximum_iterations=None
    ):
        values = tuple(loop(cond, body, tuple(loop_vars), maximum_iterations))
        final.append(values)
        return values

    sampler.run_loop = run_loop
    if log_probabilities:
        sampler.compute_probabilities = keras.ops.exp
    sampler(next, prompt, **kwargs)
    return final[-1]


def sampler_loop_results(values):
    """`(prompt, cache, index, log_probs)` from the final loop variables of
    a keras-hub sampler (`run_sampler_loop`); `log_probs` are a
    `BeamSampler`'s search log-probabilities of its flattened beams, `None`
    for other samplers. The order of the loop variables is private to
    `Sampler.__call__` and `BeamSampler.__call__`."""
    prompt, cache, index = values[:3]
    log_probs = values[4] if len(values) > 4 else None
    return prompt, cache, index, log_probs


def learning_rate_or_schedule(optimizer):
    """The learning rate Keras `optimizer` was given: its
    `LearningRateSchedule` object, another callable, or the variable that
    holds a constant rate. The public `optimizer.learning_rate` evaluates
    a schedule at the current step; Keras keeps the schedule privately."""
    return optimizer._learning_rate


def variable_storage(variable):
    """The backend's own object behind a Keras variable (a `tf.Variable`,
    a `jax.Array`, a `torch.nn.Parameter`), to write rows of it in place.
    Keras' public `variable.value` may return a cast copy (autocast)."""
    return variable._value


def set_variable_storage(variable, storage):
    """Makes a Keras variable hold `storage` (a new array or backend
    variable, of another shape when a table grows): Keras' public
    `assign` refuses a new shape."""
    variable._value = storage


def set_variable_shape(variable, shape):
    """Records the new `shape` of a Keras variable whose storage changed
    shape; Keras keeps it privately (`variable.shape` reads it)."""
    variable._shape = tuple(int(d) for d in shape)


def loss_dtype_policy(loss):
    """The `keras.DTypePolicy` a `keras.losses.Loss` was given (its name
    goes into the loss's config: `"mixed_float16"`, not the compute
    dtype `loss.dtype` returns). Keras keeps it privately."""
    return loss._dtype_policy


def take_inputs_as_given(layer):
    """Makes Keras pass `layer`'s inputs to `call` as they arrive (no
    conversion to the backend's tensors; non-tensor positional arguments
    allowed), as Keras' own lookup layers do: a data-pipeline layer that
    runs TensorFlow ops on every backend. Keras sets the flags privately."""
    layer._convert_input_args = False
    layer._allow_non_tensor_positional_args = True


# --------------------------------------------- a model instance's methods
# Keras' extension points for a model's steps are subclass overrides
# (`make_train_function`, `train_step`), which kmodels' own models use. A
# user's model is an instance of a Keras class that kmodels does not own,
# and no public API runs code on the concrete batches before its compiled
# step consumes them, or before its `fit` converts its arrays. These three
# functions are the only places kmodels writes such attributes on a model
# instance; each writes what Keras itself writes or looks up there.


def set_step_function(model, kind, function):
    """Makes `function` the step function Keras' `fit` / `evaluate` /
    `predict` (`kind`: `"train"`, `"test"`, `"predict"`) calls for
    `model`. Keras' own `make_<kind>_function` assigns the same attribute;
    a wrapper made outside it has no other way in."""
    setattr(model, f"{kind}_function", function)


def drop_step_functions(model, kinds):
    """Drops `model`'s compiled step functions of `kinds`: the next call
    of those entry points makes them again, as after `compile`. Keras'
    public `make_<kind>_function(force=True)` would make them now, which
    on JAX fixes the optimizer variables' shardings before they exist."""
    for kind in kinds:
        setattr(model, f"{kind}_function", None)


def override_methods(model, methods):
    """Sets `methods` (`{name: function}`) on the `model` instance, in
    front of its class's methods of those names (`kmodels.contracts.
    enforce` on a user's functional model: its entry points check the
    data before Keras converts it). Keras offers this only to subclasses;
    the user's model is an instance of Keras' own `Model` or `Sequential`.
    """
    for name, method in methods.items():
        setattr(model, name, method)


# ------------------------------------------------------------- version pin
_warned = False


def _distribution_version(*names):
    # Nightly builds install under another distribution name.
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def installed_versions():
    """The running versions of the packages in `CHECKED_VERSIONS`, by name
    (`None` for one not installed). keras-hub's is read from its installed
    metadata: importing it takes seconds."""
    return {
        "keras": keras.version(),
        "keras-hub": _distribution_version("keras-hub", "keras-hub-nightly"),
    }


def _major_minor(version):
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2])) if match else None


def pinned_functions():
    """The names of the functions (and classes) of this module that use
    Keras or keras-hub internals, in the order they are defined."""
    own = ("installed_versions", "pinned_functions", "check_versions")
    return [
        name
        for name, value in globals().items()
        if not name.startswith("_")
        and name not in own
        and callable(value)
        and getattr(value, "__module__", None) == __name__
    ]


def check_versions():
    """Warns once (a `UserWarning`) when the running Keras or keras-hub is
    newer than `CHECKED_VERSIONS`, naming the functions that may break;
    silent under the checked versions (and older ones, which
    `pyproject.toml` refuses). Runs when this module is imported."""
    global _warned
    if _warned:
        return
    running = installed_versions()
    newer = [
        name
        for name, checked in CHECKED_VERSIONS.items()
        if _major_minor(running.get(name)) is not None
        and _major_minor(running[name]) > _major_minor(checked)
    ]
    if not newer:
        return
    _warned = True
    checked = " and ".join(f"{n} {v}.x" for n, v in CHECKED_VERSIONS.items())
    runs = " and ".join(f"{n} {running[n]}" for n in newer)
    warnings.warn(
        f"kmodels' Keras internals were checked against {checked}; this "
        f"process runs the newer {runs}. These functions of "
        "kmodels.backend.keras_internals (and of its per-backend halves, "
        "kmodels.backend.<backend>.keras_internals) use private Keras and "
        "keras-hub APIs that a newer release may change, and may break: "
        f"{', '.join(pinned_functions())}. If one fails, please report it "
        "on the kmodels issue tracker with both versions; once "
        "backends_tests/keras_internals_test.py passes on the new versions, "
        "update CHECKED_VERSIONS in kmodels/backend/keras_internals.py.",
        UserWarning,
        stacklevel=2,
    )


# Last in the module: the warning names every function above it.
check_versions()
