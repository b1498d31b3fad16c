"""torch side of `kmodels.backend.growth`."""

import math

import keras
import numpy as np
import torch

from kmodels.backend import keras_internals
from kmodels.backend.common import reserve
from kmodels.backend.torch import table_replicas
from kmodels.backend.torch.contracts import local_numpy


def resize_variable(variable, value):
    parameter = keras_internals.variable_storage(variable)
    # Same Parameter object (torch_params keeps a reference); new storage.
    parameter.data = torch.as_tensor(
        value, dtype=parameter.dtype, device=parameter.device
    )
    keras_internals.set_variable_shape(variable, value.shape)


def host_array(x):
    # The ids a step checks, read as the contracts' checks read a batch
    # (`Tensor.numpy()`, no NumPy 2 warning per step).
    return local_numpy(x)


def append_rows(variable, rows):
    table = keras.ops.convert_to_numpy(variable.value)
    resize_variable(variable, np.concatenate([table, rows]))


def grow_in_place(layer, capacity):
    # Under EmbeddingGrowth the table, its slots in use and `trained_at`
    # are views of the first rows of buffers whose further rows (the
    # reserve) hold the values fresh rows start from: a growth within
    # them is a longer view, nothing copied. Past them, new buffers with
    # the next reserve.
    if not layer.managed_growth or table_replicas.is_replicated(layer):
        return False
    old, rows = layer.capacity, None
    for variable in reserve.grown_variables(layer):
        parameter = keras_internals.variable_storage(variable)
        data = parameter.data
        room = data.untyped_storage().nbytes() // data.element_size()
        if (room - data.storage_offset()) // data.stride(0) < capacity:
            rows = rows or reserve.next_reserve(layer, capacity)
            fresh = torch.as_tensor(
                layer.fresh_rows(variable, old, rows), device=data.device
            )
            data = torch.cat([data, fresh.to(data.dtype)])
        view = data.new_empty(0)
        shape = (capacity, *data.shape[1:])
        view.set_(
            data.untyped_storage(), data.storage_offset(), shape, data.stride()
        )
        parameter.data = view
        keras_internals.set_variable_shape(variable, shape)
    return True


def write_rows(variable, rows, values):
    data = keras_internals.variable_storage(variable).data
    with torch.no_grad():
        # `index_copy_`, not `data[rows] = values`: the latter's index_put
        # took ~16 ms for 512 rows on a loaded 2-core CPU, this ~0.03 ms.
        data.index_copy_(
            0,
            torch.as_tensor(rows, dtype=torch.long, device=data.device),
            torch.as_tensor(values, dtype=data.dtype, device=data.device),
        )


def capacity_of(variable):
    return int(variable.shape[0])


def is_concrete(x):
    return not torch.compiler.is_compiling()


class _SparseUpdate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gathered, step, layer, ids, seen):
        ctx.layer = layer
        ctx.ids = ids
        ctx.seen = seen
        ctx.save_for_backward(step)
        return gathered.clone()

    @staticmethod
    def backward(ctx, grads):
        (step,) = ctx.saved_tensors
        layer = ctx.layer
        table = layer.embeddings.value.data
        slots = [s.value.data for s in layer.trained_slots]
        with torch.no_grad():
            ids, seen = ctx.ids, ctx.seen
            grads = grads.reshape(-1, table.shape[-1])
            # Replicas (kmodels.distributed.replicate_tables): every
            # process's entries, so each applies the global batch's update.
            replicas = table_replicas.gathered_batch(layer, ids, grads, seen)
            if replicas is not None:
                ids, grads, seen = replicas
            rows, summed = _summed_rows(ids, grads, seen, table)
            # The layer's rule on copies of its rows, which it may
            # overwrite (`adam_rows_in_place`).
            new_rows, new_slot_rows = layer.table_optimizer.update_in_place(
                step.detach(),
                # `index_select`: ~5x faster than `table[rows]` on CPU.
                table.index_select(0, rows),
                [slot.index_select(0, rows) for slot in slots],
                summed,
                layer.variable_dtype,
            )
            # `index_copy_` (much faster than `table[rows] = ...` on CPU).
            table.index_copy_(0, rows, new_rows.to(table.dtype))
            for slot, slot_rows in zip(slots, new_slot_rows):
                slot.index_copy_(0, rows, slot_rows.to(slot.dtype))
            # `trained_at` (delta export): the step after this update.
            # A tensor, not `float(step)`: no host sync on an accelerator.
            trained_at = layer.trained_at.value.data
            stamp = (step.detach() + 1).to(trained_at.dtype)
            trained_at.index_copy_(0, rows, stamp.expand(rows.shape[0], 1))
            if replicas is not None:
                # No gradient for DDP to average and torch's optimizer to
                # apply: the step counts on in place (`replicate`).
                layer.step.value.data.add_(1)
                return None, None, None, None, None
            return None, step.detach() + 1, None, None, None


def adam_rows_in_place(
    rows, momentum, velocity, grads, step, rate, beta_1, beta_2, epsilon
):
    # The arithmetic of `SparseAdam.update` in torch operations, in place
    # (its `keras.ops` version costs a dozen eager Keras calls per step).
    t = float(step) + 1.0
    momentum.mul_(beta_1).add_(grads, alpha=1.0 - beta_1)
    velocity.mul_(beta_2).addcmul_(grads, grads, value=1.0 - beta_2)
    alpha = rate * math.sqrt(1.0 - beta_2**t) / (1.0 - beta_1**t)
    rows.addcdiv_(momentum, velocity.sqrt().add_(epsilon), value=-alpha)


def _summed_rows(ids, grads, seen, table):
    """The distinct rows of `ids` that some entry of `seen` names (every
    entry without `seen`), and their summed gradients: the rows and
    gradients of `GrowableEmbedding.sparse_row_update`, in torch operations
    (its `keras.ops` version, a sort and segment sums, cost about 20 eager
    Keras calls of framework overhead per step on torch)."""
    grads = grads.to(table.dtype)
    if seen is not None:
        grads = torch.where(seen[:, None], grads, 0.0)
    rows, inverse = torch.unique(ids, return_inverse=True)
    summed = grads.new_zeros((rows.shape[0], grads.shape[-1]))
    # `index_put_(accumulate=True)`, not `index_add_`: the latter took
    # 20-75 ms for 250 rows on the loaded 2-core CPU (its threads wait for
    # busy cores), this 0.03 ms.
    summed.index_put_((inverse,), grads, accumulate=True)
    if seen is not None:
        named = torch.zeros(rows.shape[0], dtype=torch.bool, device=ids.device)
        named[inverse[seen]] = True
        rows, summed = rows[named], summed[named]
    return rows, summed


def sparse_lookup(layer, ids, seen=None):
    ids = torch.as_tensor(ids).long()
    with torch.no_grad():
        gathered = layer.embeddings.value.data.index_select(0, ids)
    return _SparseUpdate.apply(gathered, layer.step.value, layer, ids, seen)


def train_step_runner(model, retrace):
    if retrace and model.jit_compile:
        # torch.compile specialised on the old rule.
        model.make_train_function(force=True)
    # Keras' step (made again for new shapes under torch.compile:
    # `kmodels.backend.torch.steps`).
    return None
