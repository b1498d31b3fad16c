"""torch side of `kmodels.backend.table_replicas`: the collectives that
keep the replicas of a `GrowableEmbedding` identical under
`DistributedDataParallel`."""

import weakref

import torch

from kmodels.backend import keras_internals

# Table -> the process group its replicas talk over. A group of their own,
# not DDP's: the all-gather of the backward pass then never interleaves
# with DDP's asynchronous gradient all-reduces on one group.
_GROUPS = weakref.WeakKeyDictionary()


def replicate(model, tables):
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "kmodels.distributed.replicate_tables needs a torch process "
            "group: call torch.distributed.init_process_group (torchrun "
            "sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT) before it; "
            "got no initialized process group."
        )
    group = dist.new_group()
    world = dist.get_world_size(group)
    mine = [(t.name, t.capacity, len(t.key_index or ())) for t in tables]
    everyone = [None] * world
    dist.all_gather_object(everyone, mine, group=group)
    for rank, theirs in enumerate(everyone):
        if theirs != mine:
            raise ValueError(
                "kmodels.distributed.replicate_tables expects every process "
                "to hold the same GrowableEmbedding tables (name, capacity, "
                "number of keys in their KeyIndex), as built from the same "
                "code or loaded from the same file; rank "
                f"{dist.get_rank()} holds {mine}, rank {rank} {theirs}."
            )
    for table in tables:
        # Rows grown later come from (seed, row): the seed must agree.
        seed = [table.seed]
        dist.broadcast_object_list(seed, src=0, group=group)
        table.seed = seed[0]
        for variable in [
            table.embeddings,
            *table.slot_variables,
            table.step,
            table.trained_at,
        ]:
            dist.broadcast(
                keras_internals.variable_storage(variable).data,
                src=0,
                group=group,
            )
        _GROUPS[table] = group
    _ignore_steps_in_ddp(model, tables)
    return world


def _ignore_steps_in_ddp(model, tables):
    """Keeps DDP from waiting for (and averaging) a gradient of the tables'
    step counters, which the sparse update increments itself."""
    steps = {id(keras_internals.variable_storage(t.step)) for t in tables}
    names = set(getattr(model, "_ddp_params_and_buffers_to_ignore", ()))
    # DDP matches both forms: `named_parameters()` of the model and
    # `module_name.param_name` per module; a Keras model lists a
    # sublayer's variables in its own parameters too.
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in steps:
            names.add(name)
    for module_name, module in model.named_modules(remove_duplicate=False):
        for name, parameter in module.named_parameters(
            recurse=False, remove_duplicate=False
        ):
            if id(parameter) in steps:
                names.add(f"{module_name}.{name}")
    # torch's one way to exclude parameters from DDP (underscored, but the
    # way its docs and FSDP use; torch 2.13 as of this writing).
    ddp = torch.nn.parallel.DistributedDataParallel
    ddp._set_params_and_buffers_to_ignore_for_model(model, sorted(names))


def is_replicated(layer):
    return layer in _GROUPS


def largest_id(layer, high):
    group = _GROUPS.get(layer)
    if group is None:
        return high
    value = torch.tensor([int(high)], dtype=torch.int64)
    torch.distributed.all_reduce(
        value, op=torch.distributed.ReduceOp.MAX, group=group
    )
    return int(value.item())


def gathered_batch(layer, ids, grads, seen):
    """`(ids, grads, seen)` of every replica of `layer`, concatenated in
    rank order, the gradients divided by the number of processes (DDP's
    average); `None` for a table that is not replicated.

    One all-gather of the entries packed in float64 (ids below 2**53 and
    float32 gradients convert exactly), after one of their counts: the
    replicas' batches may differ in size (the last batch of an epoch), the
    entries are padded to the largest.
    """
    group = _GROUPS.get(layer)
    if group is None:
        return None
    dist = torch.distributed
    world = dist.get_world_size(group)
    device = grads.device
    count = torch.tensor([ids.shape[0]], dtype=torch.int64, device=device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count, group=group)
    counts = [int(c.item()) for c in counts]
    most = max(counts)
    packed = torch.zeros(
        (most, grads.shape[-1] + 2), dtype=torch.float64, device=device
    )
    packed[: ids.shape[0], 0] = ids.to(torch.float64)
    packed[: ids.shape[0], 1] = 1.0 if seen is None else seen.to(torch.float64)
    packed[: ids.shape[0], 2:] = grads.to(torch.float64)
    parts = [torch.empty_like(packed) for _ in range(world)]
    dist.all_gather(parts, packed, group=group)
    entries = torch.cat([part[:n] for part, n in zip(parts, counts)])
    return (
        entries[:, 0].to(device=ids.device, dtype=torch.long),
        (entries[:, 2:] / world).to(grads.dtype),
        (entries[:, 1] > 0).to(ids.device),
    )
