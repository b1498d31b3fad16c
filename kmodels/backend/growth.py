"""Backend hooks for tables that grow between train steps.

`kmodels.layers.GrowableEmbedding` and `kmodels.callbacks.EmbeddingGrowth` read
the same on every backend; the few things that differ live behind the
functions below:

- `resize_variable`: give a built Keras variable a new shape (Keras' own
  `assign` refuses a new shape), in the layout the distribution gave it.
- `append_rows`: grow a table by rows; `write_rows`: overwrite some rows
  (restart rows a bounded `KeyIndex` gave to new keys); `row_shards`,
  `planned_row_shards`: the number of shards of its rows under
  `keras.distribution` (JAX).
- `sparse_lookup`: gather rows of the table and, in the backward pass, apply
  the table's own optimizer to the rows of the batch only.
- `adam_rows_in_place`: torch's in-place form of `SparseAdam`'s update.
- `sparse_updates_disabled`: a scope (diagnostics) in which no table grows
  and no sparse update runs: the table is read like a plain embedding, and
  its gradient is an ordinary (dense) gradient. TensorFlow and
  torch write the rows in place into non-trainable variables; JAX has no side
  effects, so there the table and its slots are trainable variables with
  `overwrite_with_gradient=True` whose "gradient" is their updated value.
- `is_concrete`: whether a tensor holds data (eager) or is being traced.
- `host_array`: concrete ids as NumPy, gathered from every process where a
  multi-process JAX batch spans other processes' devices.
- `global_batches`: the whole global batches a step consumes (TensorFlow's
  `MirroredStrategy` hands the step per-replica slices; growth reads them
  joined).
- `wrap_train_function`: run a growth hook on each batch, with concrete data,
  right before `model.fit` runs the compiled step on it (a
  `kmodels.backend.steps` hook, after the input checks); per backend,
  `train_step_runner` says which step runs then. On JAX the hook also
  hands the step each table padded to a reserve (`compiled_rows`; JAX's
  `pad_step_state`, `unpad_tables`, `padded_state_scope`, which TensorFlow
  and torch do not define), its padding rows holding the values fresh rows
  start from, so that a growth within it keeps the compiled step and
  changes values only (`reserve_growth`, `grow_in_place`): no state is
  written back, no row copied, nothing traced. torch keeps the reserve in
  the variables' buffers; TensorFlow, whose `variable.value` is the whole
  `tf.Variable`, only its fresh rows (`grow_in_place`).

The backend never imports `kmodels.growable`: what it needs from a table it
reaches through the layer object it is given. `sparse_lookup(layer, ...)`
reads `layer.embeddings`, `layer.trained_slots` and `layer.step`, and its
backward pass calls `layer.sparse_row_update` (TensorFlow, JAX: the sort,
gradient sums and rule in `keras.ops`) or, on torch, sums the gradients in
torch operations and calls the rule's `update_in_place`
(`layer.table_optimizer`, a `kmodels.growable.optimizers.SparseOptimizer`).
The update equations live in those optimizer classes, in `keras.ops`;
where a backend has a faster form of one (torch's in-place Adam), it stays
behind a function of this module (`adam_rows_in_place`) that the optimizer
calls, so the optimizer, not the backend, picks its update.
"""

import contextlib
import threading

import keras

from kmodels.backend import native
from kmodels.backend import native_function
from kmodels.backend import steps

_STATE = threading.local()


@contextlib.contextmanager
def sparse_updates_disabled():
    """A scope in which `GrowableEmbedding` neither grows nor updates rows.

    Inside it a training call reads the table like a plain embedding
    (`take`, ids at or past the capacity give zero vectors) and the table's
    gradient is an ordinary dense gradient: no sparse optimizer runs in the
    backward pass, no row or slot is written, the step counter is not used.
    `kmodels.diagnostics` computes gradients under it. Nests.
    """
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1


def sparse_updates_enabled():
    """False inside `sparse_updates_disabled()`."""
    return not getattr(_STATE, "depth", 0)


def table_is_trainable():
    """Whether the table and its optimizer slots are trainable variables
    (overwritten with their updated value) on this backend: True on JAX,
    False on TensorFlow and torch (rows written in place)."""
    trainable = native_function("growth", "table_is_trainable")
    return False if trainable is None else trainable()


def make_resizable(variable):
    """Prepares a freshly built variable for `resize_variable` (TensorFlow:
    a `tf.Variable` whose first dimension is dynamic, so that functions
    traced before a growth keep reading the grown variable; nothing to do
    on JAX and torch)."""
    make = native_function("growth", "make_resizable")
    if make is not None:
        make(variable)


def resize_variable(variable, value):
    """Replaces the value of a built Keras `variable` by the NumPy array
    `value`, whose shape may differ from the variable's."""
    native.growth.resize_variable(variable, value)


def append_rows(variable, rows):
    """Appends the NumPy `rows` to a built Keras table `variable` (old rows
    kept). JAX appends on the devices, in the variable's sharding; the other
    backends read the table back and resize it."""
    native.growth.append_rows(variable, rows)


def write_rows(variable, rows, values):
    """Writes the NumPy `values` into the rows `rows` (sorted, unique, int64,
    in range) of a built Keras table `variable`, in place where the backend
    allows it: costs in proportion to `len(rows)`, not to the table
    (JAX: a scatter into a donated buffer, in the variable's sharding).
    Outside compiled steps only."""
    native.growth.write_rows(variable, rows, values)


def row_shards(variable):
    """Number of pieces the variable's first dimension is split into by
    the distribution it was created under (`keras.distribution`, JAX only;
    1 elsewhere and without a distribution)."""
    shards = native_function("growth", "row_shards")
    return 1 if shards is None else shards(variable)


def planned_row_shards(layer, name, shape):
    """`row_shards` of the variable `layer.add_weight(name=name, shape=
    shape)` would create now, before it exists: JAX refuses to shard a row
    count that the shards do not divide, so the layer must pick a multiple
    first. Asks the current distribution for the layout of the variable's
    future path, as Keras does when the variable is created (JAX; 1
    elsewhere and without a distribution)."""
    shards = native_function("growth", "planned_row_shards")
    return 1 if shards is None else shards(layer, name, shape)


def sparse_lookup(layer, ids, seen=None):
    """Rows `layer.embeddings[ids]` for flat int32 `ids` (all in range);
    differentiating through them updates the rows of `ids` with the layer's
    sparse optimizer (`layer.sparse_row_update`; torch:
    `layer.table_optimizer.update_in_place`). `seen`: optional boolean
    mask of `ids`; the rows of entries where it is false are left unchanged
    (values and slots), as if those entries were not in the batch."""
    return native.growth.sparse_lookup(layer, ids, seen)


def adam_rows_in_place(
    rows, momentum, velocity, grads, step, rate, beta_1, beta_2, epsilon
):
    """Adam's update of gathered `rows` and their `momentum` and `velocity`
    slot rows, written into those tensors (fresh copies), with a constant
    learning `rate` and `t = step + 1`: the arithmetic of
    `SparseAdam.update` in torch operations (torch's eager backward pass,
    where its `keras.ops` version costs a dozen eager Keras calls per
    step). TensorFlow and JAX trace the update and never call it: they
    raise `NotImplementedError`."""
    adam = native_function("growth", "adam_rows_in_place")
    if adam is None:
        # Never called there: the update is traced, in `keras.ops`
        # (`SparseAdam.update`).
        raise NotImplementedError(
            "adam_rows_in_place is torch's in-place Adam; "
            f"{keras.backend.backend()} runs SparseAdam.update."
        )
    adam(
        rows,
        momentum,
        velocity,
        grads,
        step,
        rate,
        beta_1,
        beta_2,
        epsilon,
    )


def argsort_ids(ids, capacity):
    """An ordering that sorts the flat int32 `ids` (all in
    `[0, capacity)`; `capacity` may be `None`, unknown); the order among
    equal ids is unspecified (JAX packs the positions into the ids where
    they fit; `keras.ops.argsort` elsewhere)."""
    argsort = native_function("growth", "argsort_ids")
    if argsort is None:
        return keras.ops.argsort(ids)
    return argsort(ids, capacity)


def capacity_of(variable):
    """Rows of a table variable, read without reading the table (a
    tensor on TensorFlow, where the first dimension is dynamic)."""
    return native.growth.capacity_of(variable)


def grow_in_place(layer, capacity):
    """Grows `layer`'s table, slots and `trained_at` to `capacity` rows
    through the table's reserve (`kmodels.backend.common.reserve`) under
    `EmbeddingGrowth`, and returns True: JAX, within the reserve while the
    growth hook runs a `reserve_growth`, changes the row count only (the
    step holds the rows); torch makes the variables longer views of their
    reserve buffers (a new buffer past it); TensorFlow appends on the
    device fresh rows drawn once per reserve. False otherwise: the caller
    appends the rows."""
    grow = native_function("growth", "grow_in_place")
    return False if grow is None else grow(layer, capacity)


def compiled_rows(layer):
    """Rows of `layer`'s table (and slots) that the compiled train step
    holds: its capacity, except on JAX under `EmbeddingGrowth`, where the
    step sees the table padded to a reserve that outlasts the next
    growths (`kmodels.backend.jax.growth.compiled_rows`), so that a growth
    within it compiles nothing. A change of this number is a
    recompilation."""
    rows = native_function("growth", "compiled_rows")
    # Elsewhere the step sees the variable itself.
    return layer.capacity if rows is None else rows(layer)


def is_concrete(x):
    """True when `x` holds data (not a symbolic or traced tensor)."""
    if isinstance(x, keras.KerasTensor):
        return False
    return native.growth.is_concrete(x)


def host_array(x):
    """`x` (concrete ids) as a NumPy array on this process, whole: under a
    multi-process JAX distribution a batch can span devices of other
    processes, and every process then gathers it (a collective, called
    by every process in the same order, as their steps are). Keras'
    `convert_to_numpy` elsewhere."""
    gather = native_function("growth", "host_array")
    return keras.ops.convert_to_numpy(x) if gather is None else gather(x)


def global_batches(batches):
    """The batches a step is about to consume, whole: under TensorFlow's
    `MirroredStrategy` `fit` hands the step per-replica slices of each
    global batch, which this joins again (growth, the id checks and the
    row restarts read the global batch); the batches themselves
    elsewhere."""
    join = native_function("growth", "global_batches")
    return batches if join is None else join(batches)


def _unpad_tables(tables):
    """JAX: `tables` read their capacity again (`pad_step_state`); nothing
    to do elsewhere."""
    unpad = native_function("growth", "unpad_tables")
    if unpad is not None:
        unpad(tables)


class _GrowthHook(steps.StepHook):
    """Grows the tables of a model before each train step: the second of
    the step hooks, after the input checks (`kmodels.contracts`)."""

    order = 10

    def __init__(self, controller, runner, tables=()):
        self.controller = controller
        self._runner = runner
        self._tables = list(tables)

    def before_step(self, step):
        # JAX: the tables read their capacity again (`pad_step_state`).
        _unpad_tables(self._tables)
        plan = self.controller.plan(global_batches(step.batches))
        # JAX: a growth within the reserve of every table it grows is a
        # value update: the step's state already holds the rows.
        reserve = native_function("growth", "reserve_growth")
        in_reserve = None
        if plan and reserve is not None:
            in_reserve = reserve(step, {t: c for t, (c, _) in plan.items()})
        if in_reserve is not None:
            with in_reserve:
                self.controller.apply(plan)
        elif plan:
            # During an epoch JAX keeps the state outside the variables:
            # `step.variables()` writes it back and reads it again after.
            with step.variables():
                self.controller.apply(plan)
            step.shapes_changed()
        resets = self.controller.take_resets()
        if resets:
            # No shape changes: nothing is traced again.
            with step.variables():
                self.controller.apply_resets(resets)
        # JAX: the step sees each table padded to its compiled rows.
        pad = native_function("growth", "pad_step_state")
        if pad is not None:
            pad(step, self._tables)

    @contextlib.contextmanager
    def scope(self):
        try:
            yield
        finally:
            # JAX: the variables read their capacity again as soon as the
            # step is traced (the state keeps its padding).
            _unpad_tables(self._tables)

    def runner(self, step):
        return self._runner


def wrap_train_function(model, controller, retrace=False, tables=()):
    """Installs `controller` before each of `model`'s train steps, as a
    `kmodels.backend.steps` hook.

    Before each compiled step, `controller.plan(batches)` gets the batches
    the step is about to consume (concrete data); when it returns a non-empty
    plan, `controller.apply(plan)` grows the tables (the model's variables
    hold the running state meanwhile, also on JAX), and the step is traced
    again where its compiled form is specialised on shapes. Then
    `controller.take_resets()` returns the rows to restart (`{table:
    rows}`), which `controller.apply_resets(resets)` writes. `retrace=True`
    drops the compiled step of an earlier `fit` first: a table's rule
    changed (`GrowableEmbedding.follow_optimizer`), and a traced step holds
    its constants. `tables`: the `GrowableEmbedding`s the controller
    grows (on JAX the step holds them padded to `compiled_rows`). Returns
    a function that removes the hook.
    """
    runner = native.growth.train_step_runner(model, retrace)
    hook = _GrowthHook(controller, runner, tables)
    steps.add_hook(model, "train", hook)
    # JAX: the padded state lasts until the hook is removed.
    padded_scope = native_function("growth", "padded_state_scope")
    undo = None if padded_scope is None else padded_scope(model, tables)

    def unwrap():
        steps.remove_hook(model, "train", hook)
        if undo is not None:
            undo()

    return unwrap
