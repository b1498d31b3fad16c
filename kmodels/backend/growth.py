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
- `sparse_updates_disabled`: a scope (diagnostics) in which no table grows
  and no sparse update runs: the table is read like a plain embedding, and
  its gradient is an ordinary (dense) gradient. TensorFlow and
  torch write the rows in place into non-trainable variables; JAX has no side
  effects, so there the table and its slots are trainable variables with
  `overwrite_with_gradient=True` whose "gradient" is their updated value.
- `is_concrete`: whether a tensor holds data (eager) or is being traced.
- `wrap_train_function`: run a growth hook on each batch, with concrete data,
  right before `model.fit` runs the compiled step on it.
"""

import contextlib
import threading

import keras

from kmodels.backend import native

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
    return native.growth.table_is_trainable()


def make_resizable(variable):
    """Prepares a freshly built variable for `resize_variable` (TensorFlow:
    a `tf.Variable` whose first dimension is dynamic, so that functions
    traced before a growth keep reading the grown variable; nothing to do
    on JAX and torch)."""
    native.growth.make_resizable(variable)


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
    return native.growth.row_shards(variable)


def planned_row_shards(layer, name, shape):
    """`row_shards` of the variable `layer.add_weight(name=name, shape=
    shape)` would create now, before it exists: JAX refuses to shard a row
    count that the shards do not divide, so the layer must pick a multiple
    first. Asks the current distribution for the layout of the variable's
    future path, as Keras does when the variable is created (JAX; 1
    elsewhere and without a distribution)."""
    return native.growth.planned_row_shards(layer, name, shape)


def sparse_lookup(layer, ids, seen=None):
    """Rows `layer.embeddings[ids]` for flat int32 `ids` (all in range);
    differentiating through them updates the rows of `ids` with the layer's
    sparse optimizer (`layer.sparse_row_update`). `seen`: optional boolean
    mask of `ids`; the rows of entries where it is false are left unchanged
    (values and slots), as if those entries were not in the batch."""
    return native.growth.sparse_lookup(layer, ids, seen)


def argsort_ids(ids, capacity):
    """An ordering that sorts the flat int32 `ids` (all in
    `[0, capacity)`; `capacity` may be `None`, unknown); the order among
    equal ids is unspecified."""
    return native.growth.argsort_ids(ids, capacity)


def capacity_of(variable):
    """Rows of a table variable, read without reading the table (a
    tensor on TensorFlow, where the first dimension is dynamic)."""
    return native.growth.capacity_of(variable)


def is_concrete(x):
    """True when `x` holds data (not a symbolic or traced tensor)."""
    if isinstance(x, keras.KerasTensor):
        return False
    return native.growth.is_concrete(x)


def wrap_train_function(model, controller, retrace=False):
    """Installs `controller` in front of `model.train_function`.

    Before each compiled step, `controller.plan(batches)` gets the batches
    the step is about to consume (concrete data); when it returns a non-empty
    plan, the model's state is written back to its variables (JAX),
    `controller.apply(plan)` grows the tables, and the step is recompiled for
    the new shapes. Then `controller.take_resets()` returns the rows to
    restart (`{table: rows}`); when it is not empty the state is written
    back (JAX) and `controller.apply_resets(resets)` writes them (no
    recompilation: no shape changed). `retrace=True` drops the compiled
    step of an earlier `fit` first: a table's rule changed
    (`GrowableEmbedding.follow_optimizer`), and a traced step holds its
    constants. Returns a function that removes the hook.
    """
    return native.growth.wrap_train_function(model, controller, retrace)
