"""JAX side of `kmodels.backend.growth`."""

import contextlib
import math
import types

import jax
import jax.numpy as jnp
import keras
import numpy as np

from kmodels.backend import keras_internals
from kmodels.backend.common import reserve
from kmodels.backend.jax import keras_internals as jax_internals


def host_array(x):
    # A global array of a multi-process run (keras.distribution.initialize)
    # holds only this process's shards; every process gathers the whole.
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return keras.ops.convert_to_numpy(x)


def table_is_trainable():
    # No side effects under `jax.jit`: the new rows travel back as the
    # cotangent of the table, and Keras' optimizer overwrites the variable
    # with it.
    return True


def _sharding(variable):
    """The `jax.sharding.Sharding` Keras gave `variable` from the
    distribution when it was created, or `None` (no distribution)."""
    layout = getattr(variable, "_layout", None)
    return getattr(layout, "backend_layout", layout)


def resize_variable(variable, value):
    shape = tuple(int(d) for d in value.shape)
    sharding = _sharding(variable)
    if sharding is None:
        new = jnp.asarray(value, dtype=variable.dtype)
    else:
        # Straight from host memory: each device receives only its rows.
        value = np.asarray(value, dtype=jnp.dtype(variable.dtype))
        new = keras.distribution.distribute_tensor(value, sharding)
    keras_internals.set_variable_shape(variable, shape)
    keras_internals.set_variable_storage(variable, new)


def append_rows(variable, rows):
    sharding = _sharding(variable)
    old = variable.value
    rows = np.asarray(rows, dtype=old.dtype)
    if sharding is None:
        new = _resized(old, old.shape[0] + len(rows), rows)
    else:
        # The old rows never leave the devices: XLA moves the rows whose
        # shard changes device to device, and only the new rows come from
        # the host, each device receiving its part.
        rows = keras.distribution.distribute_tensor(rows, sharding)
        new = jax.jit(_concatenate, out_shardings=sharding)(old, rows)
    keras_internals.set_variable_shape(variable, new.shape)
    keras_internals.set_variable_storage(variable, new)


def _concatenate(old, rows):
    return jnp.concatenate([old, rows])


def write_rows(variable, rows, values):
    sharding = _sharding(variable)
    # Padded to a power of two (the first row repeated, with its values) so
    # that a handful of shapes serve every count.
    n = len(rows)
    size = 1 << max(0, (n - 1).bit_length())
    pad = np.zeros(size - n, np.int64)
    rows = np.concatenate([rows, pad + rows[0]]).astype(np.int32)
    values = np.asarray(values, dtype=jnp.dtype(variable.dtype))
    values = np.concatenate([values, np.repeat(values[:1], size - n, 0)])
    keras_internals.set_variable_storage(
        variable, _scatter(sharding)(variable.value, rows, values)
    )


_SCATTERS = {}


def _scatter(sharding):
    """A jitted `table.at[rows].set(values)` that donates the table: XLA
    writes the rows in place instead of copying the table."""
    key = None if sharding is None else sharding
    if key not in _SCATTERS:
        _SCATTERS[key] = jax.jit(
            _set_rows,
            donate_argnums=0,
            out_shardings=sharding,
        )
    return _SCATTERS[key]


def _set_rows(table, rows, values):
    return table.at[rows].set(values)


def row_shards(variable):
    sharding = _sharding(variable)
    if sharding is None:
        return 1
    shape = tuple(variable.shape)
    return shape[0] // sharding.shard_shape(shape)[0]


def planned_row_shards(layer, name, shape):
    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    # The same scope as `Layer.add_weight`, hence the same path.
    with keras.name_scope(layer.name, caller=layer):
        parent = jax_internals.current_path()
    future = types.SimpleNamespace(
        path=f"{parent}/{name}" if parent else name,
        shape=tuple(shape),
        _layout=None,
    )
    return _layout_row_shards(distribution.get_variable_layout(future))


def _layout_row_shards(layout):
    """Number of pieces a `keras.distribution.TensorLayout` cuts a
    variable's first dimension into (1 for `None` or a replicated one)."""
    if layout is None or getattr(layout, "device_mesh", None) is None:
        return 1
    axes = tuple(layout.axes)
    if not axes or axes[0] is None:
        return 1
    names = axes[0] if isinstance(axes[0], (tuple, list)) else (axes[0],)
    mesh = layout.device_mesh
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    return math.prod(int(sizes[n]) for n in names)


def argsort_ids(ids, capacity):
    if capacity is None:
        return keras.ops.argsort(ids)
    # XLA:CPU sorts one int32 array several times faster than it sorts
    # (key, index) pairs: pack the position into the low bits when it fits.
    n = ids.shape[0]
    bits = max(1, (n - 1).bit_length())
    if capacity < 2 ** (31 - bits):
        packed = ids * (1 << bits) + jnp.arange(n, dtype=jnp.int32)
        return jnp.sort(packed) & ((1 << bits) - 1)
    return jnp.argsort(ids, stable=False)


def capacity_of(variable):
    # The rows of the array the variable holds now: inside a train step
    # under `EmbeddingGrowth`, the padded table (`compiled_rows`), so that
    # the step's trace does not depend on the capacity.
    value = jax_internals.stateless_value(variable)
    return int((variable if value is None else value).shape[0])


# ---------------------------------------------------- padded train state
# Under `EmbeddingGrowth`, the jitted train step receives each table and
# its slots padded to `compiled_rows(layer)`, the table's reserve
# (`kmodels.backend.common.reserve`: the first one before any growth, the
# next ones set at a growth past it): the next growths
# fit in it and keep the compiled step (no retrace, no XLA
# compilation). The model's variables keep the logical capacity: the
# padding lives only in the state Keras' trainer passes from step to step
# during an epoch, and is cut off whenever that state is written back
# (`padded_state_scope`). No id reaches a padding row: the hook grew the
# table for every id of the batch before the step.


def _paddable(layer):
    """Whether the step may hold `layer`'s table padded: under
    `EmbeddingGrowth` and without `keras.distribution` (a sharded or
    replicated table keeps its layout's shape)."""
    from kmodels.backend import table_replicas

    return (
        layer.managed_growth
        and keras.distribution.distribution() is None
        and _sharding(layer.embeddings) is None
        and not table_replicas.is_replicated(layer)
    )


def compiled_rows(layer):
    capacity = layer.capacity
    if not _paddable(layer):
        return capacity
    rows = getattr(layer, "_kmodels_compiled_rows", None)
    if rows is None:
        # Before the first growth: a small table gets the first reserve,
        # so that growing into it compiles nothing.
        rows = reserve.first_reserve(layer, capacity)
    elif rows < capacity:
        rows = reserve.next_reserve(layer, capacity)
    layer.__dict__["_kmodels_compiled_rows"] = rows
    return rows


def _refresh_reserves(tables, changed):
    """The step is compiled again for the tables in `changed` (new
    reserves): every other table past half its reserve takes its next one
    now, in the same compilation, rather than a compilation of its own a
    few steps later."""
    for layer in tables:
        rows = layer.__dict__.get("_kmodels_compiled_rows")
        if layer in changed or rows is None or not _paddable(layer):
            continue
        if 2 * layer.capacity > rows:
            layer.__dict__["_kmodels_compiled_rows"] = reserve.next_reserve(
                layer, layer.capacity
            )


def pad_step_state(step, tables):
    if step.kind != "train":
        return
    padded = {}
    tables = [t for t in tables if t.built and _paddable(t)]
    # Tables whose rows in the step changed since the last step (a new
    # reserve): the step compiles again.
    changed = [
        t
        for t in tables
        if compiled_rows(t) != t.__dict__.get("_kmodels_step_rows")
    ]
    if changed:
        _refresh_reserves(tables, changed)
    for layer in tables:
        rows = compiled_rows(layer)
        layer.__dict__["_kmodels_step_rows"] = rows
        capacity = layer.capacity
        if rows <= capacity:
            continue
        variables = reserve.grown_variables(layer)
        # Keras checks the values a step gets against the variables'
        # shapes: they read padded until the state is written back.
        layer.__dict__["_kmodels_padding"] = (capacity, variables)
        for variable in variables:
            padded[id(variable)] = (layer, rows)
            shape = (rows, *tuple(variable.shape)[1:])
            keras_internals.set_variable_shape(variable, shape)
    _pad_state_values(step, padded)


def _pad_state_values(step, padded):
    """Pads the values of the variables in `padded` (`{id: (layer,
    rows)}`) in the step's state to their `rows`, with the values fresh
    rows start from (`layer.fresh_rows`): a later growth within the
    reserve finds its rows in place."""
    if not padded:
        return
    trainable = list(step.state[0])
    for i, variable in enumerate(step.model.trainable_variables):
        layer, rows = padded.get(id(variable), (None, None))
        value = trainable[i]
        if rows is None or value.shape[0] >= rows:
            continue
        fresh = reserve.fresh_rows(layer, variable, int(value.shape[0]), rows)
        trainable[i] = _resized(value, rows, fresh)
    step.state = (trainable, *step.state[1:])


# The variables a growth within the reserve is running for
# (`reserve_growth`): `grow_in_place` changes their shapes only.
_IN_RESERVE = {}


def grow_in_place(layer, capacity):
    variables = reserve.grown_variables(layer)
    if not variables or not all(id(v) in _IN_RESERVE for v in variables):
        return False
    # The step's state holds the rows with their fresh values already
    # (`reserve_growth`); the variables read them at the next sync, cut
    # to their new shapes.
    for variable in variables:
        shape = (int(capacity), *tuple(variable.shape)[1:])
        keras_internals.set_variable_shape(variable, shape)
    return True


def reserve_growth(step, plan):
    if step.kind != "train":
        return None
    fits = all(
        layer.built
        and _paddable(layer)
        and layer.__dict__.get("_kmodels_compiled_rows") is not None
        and capacity <= compiled_rows(layer)
        for layer, capacity in plan.items()
    )
    if not fits:
        return None
    padded = {}
    for layer in plan:
        rows = compiled_rows(layer)
        for variable in reserve.grown_variables(layer):
            padded[id(variable)] = (layer, rows)
    # The state holds the rows the growth reaches, with their fresh values
    # (the padding); the variables' shapes say how many are the table's.
    _pad_state_values(step, padded)
    return _reserve_scope(padded)


@contextlib.contextmanager
def _reserve_scope(padded):
    _IN_RESERVE.update(padded)
    try:
        yield
    finally:
        for key in padded:
            _IN_RESERVE.pop(key, None)


def _resized(value, rows, new_rows=None):
    """`value` (one device) cut to its first `rows` rows, or followed by
    `new_rows` (zeros by default) up to `rows`. On CPU through NumPy: a
    copy, where the same in `jax.numpy` would compile an XLA program for
    every new shape (tens of ms each, at each growth)."""
    n = int(value.shape[0])
    cpu = all(d.platform == "cpu" for d in value.devices())
    if rows <= n:
        return _owned(np.asarray(value)[:rows]) if cpu else value[:rows]
    if new_rows is None:
        new_rows = np.zeros((rows - n, *value.shape[1:]), value.dtype)
    new_rows = np.asarray(new_rows, dtype=value.dtype)
    if cpu:
        return _owned(np.concatenate([np.asarray(value), new_rows]))
    return jnp.concatenate([value, jnp.asarray(new_rows)])


def _owned(host):
    # A buffer of its own: `np.asarray` of a CPU array may view the
    # array's memory, which the next step donates (writes in place).
    return jax.device_put(host, may_alias=False)


def unpad_tables(tables):
    """Gives the variables of `tables` their logical shapes back (the
    capacity), before anything reads or grows them between steps."""
    for layer in tables:
        padding = layer.__dict__.pop("_kmodels_padding", None)
        if padding is None:
            continue
        capacity, variables = padding
        for variable in variables:
            shape = (capacity, *tuple(variable.shape)[1:])
            keras_internals.set_variable_shape(variable, shape)


def padded_state_scope(model, tables):
    """Makes `model.jax_state_sync` (Keras' trainer writing the running
    state back into the variables: at epoch ends, for callbacks, for the
    growth hook) cut the padding off first. Returns the undo."""
    if not tables:
        return lambda: None
    original = type(model).jax_state_sync

    def sync():
        unpad_tables(tables)
        jax_internals.trim_jax_state(model, _resized)
        original(model)

    restore = jax_internals.override_state_sync(model, sync)

    def undo():
        unpad_tables(tables)
        restore()

    return undo


def is_concrete(x):
    return not isinstance(x, jax.core.Tracer)


def sparse_lookup(layer, ids, seen=None):
    slots = [s.value for s in layer.updated_slots]

    @jax.custom_vjp
    def lookup(table, slots, step, ids, seen):
        return jnp.take(table, ids, axis=0)

    def forward(table, slots, step, ids, seen):
        return lookup(table, slots, step, ids, seen), (
            table,
            slots,
            step,
            ids,
            seen,
        )

    def backward(residuals, grads):
        table, slots, step, ids, seen = residuals
        arrays = [table, *slots]
        rows, new_rows, new_slot_rows = layer.sparse_row_update(
            lambda k, r: jnp.take(arrays[k], r, axis=0),
            step,
            ids,
            grads,
            capacity=table.shape[0],
            seen=seen,
        )
        # Scatters into a buffer that jit donated: XLA updates it in place.
        new_table = table.at[rows].set(new_rows.astype(table.dtype))
        new_slots = [
            s.at[rows].set(r.astype(s.dtype))
            for s, r in zip(slots, new_slot_rows)
        ]
        return new_table, new_slots, step + 1, None, None

    lookup.defvjp(forward, backward)
    return lookup(
        layer.embeddings.value,
        slots,
        layer.step.value,
        jnp.asarray(ids),
        None if seen is None else jnp.asarray(seen),
    )


def train_step_runner(model, retrace):
    if retrace:
        # The jitted step of an earlier fit holds the old rule's constants.
        model.make_train_function(force=True)
    # Keras' jitted step; it retraces for new shapes by itself.
    return None
