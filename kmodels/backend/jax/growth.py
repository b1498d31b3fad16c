"""JAX side of `kmodels.backend.growth`."""

import math
import types

import jax
import jax.numpy as jnp
import keras
import numpy as np

from kmodels.backend import keras_internals
from kmodels.backend.jax import keras_internals as jax_internals


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


def make_resizable(variable):
    # A JAX array is replaced whole by `resize_variable`: nothing to do.
    return None


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
        new = jnp.concatenate([old, jnp.asarray(rows)])
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
    return int(variable.shape[0])


def is_concrete(x):
    return not isinstance(x, jax.core.Tracer)


def sparse_lookup(layer, ids, seen=None):
    slots = [s.value for s in layer.trained_slots]

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


def adam_rows_in_place(
    rows, momentum, velocity, grads, step, rate, beta_1, beta_2, epsilon
):
    # Never called: only torch's eager backward pass updates rows in
    # place; here the update is traced, in `keras.ops` (`SparseAdam.update`).
    raise NotImplementedError(
        "adam_rows_in_place is torch's in-place Adam; jax runs "
        "SparseAdam.update."
    )


def train_step_runner(model, retrace):
    if retrace:
        # The jitted step of an earlier fit holds the old rule's constants.
        model.make_train_function(force=True)
    # Keras' jitted step; it retraces for new shapes by itself.
    return None


def global_batches(batches):
    """The batches a step consumes, as they are: the step sees the whole
    global batch here (TensorFlow's `MirroredStrategy` is the one engine
    that hands it per-replica slices)."""
    return batches
