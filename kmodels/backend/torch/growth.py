"""torch side of `kmodels.backend.growth`."""

import keras
import numpy as np
import torch


def table_is_trainable():
    # Rows are written in place (no_grad) in the backward pass.
    return False


def make_resizable(variable):
    # `resize_variable` gives the same Parameter new storage: nothing to do.
    return None


def resize_variable(variable, value):
    parameter = variable._value
    # Same Parameter object (torch_params keeps a reference); new storage.
    parameter.data = torch.as_tensor(
        value, dtype=parameter.dtype, device=parameter.device
    )
    variable._shape = tuple(int(d) for d in value.shape)


def append_rows(variable, rows):
    table = keras.ops.convert_to_numpy(variable.value)
    resize_variable(variable, np.concatenate([table, rows]))


def write_rows(variable, rows, values):
    data = variable._value.data
    with torch.no_grad():
        # `index_copy_`, not `data[rows] = values`: the latter's index_put
        # took ~16 ms for 512 rows on a loaded 2-core CPU, this ~0.03 ms.
        data.index_copy_(
            0,
            torch.as_tensor(rows, dtype=torch.long, device=data.device),
            torch.as_tensor(values, dtype=data.dtype, device=data.device),
        )


def row_shards(variable):
    # keras.distribution has no torch backend: tables are never sharded.
    return 1


def planned_row_shards(layer, name, shape):
    return 1


def argsort_ids(ids, capacity):
    return keras.ops.argsort(ids)


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
            tensors = [table, *slots]
            rows, new_rows, new_slot_rows = layer.sparse_row_update(
                lambda k, r: tensors[k][r.long()],
                step.detach(),
                ctx.ids,
                grads,
                seen=ctx.seen,
            )
            rows = rows.long()
            # `index_copy_` (much faster than `table[rows] = ...` on CPU);
            # repeated rows carry identical values, so the result is exact.
            table.index_copy_(0, rows, new_rows.to(table.dtype))
            for slot, slot_rows in zip(slots, new_slot_rows):
                slot.index_copy_(0, rows, slot_rows.to(slot.dtype))
            return None, step.detach() + 1, None, None, None


def sparse_lookup(layer, ids, seen=None):
    ids = torch.as_tensor(ids).long()
    with torch.no_grad():
        gathered = layer.embeddings.value.data[ids]
    return _SparseUpdate.apply(gathered, layer.step.value, layer, ids, seen)


def wrap_train_function(model, controller, retrace):
    if retrace and model.jit_compile:
        # torch.compile specialised on the old rule.
        model.make_train_function(force=True)
    state = {"original": model.train_function}

    def train_function(data):
        plan = controller.plan(data)
        if plan:
            controller.apply(plan)
            if model.jit_compile:
                # torch.compile specialised on the old shapes.
                model.train_function = None
                model.make_train_function()
                state["original"] = model.train_function
                model.train_function = train_function
        resets = controller.take_resets()
        if resets:
            controller.apply_resets(resets)
        return state["original"](data)

    model.train_function = train_function

    def unwrap():
        if model.train_function is train_function:
            model.train_function = state["original"]

    return unwrap
