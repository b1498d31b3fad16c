"""JAX side of `kmodels.backend.contracts`."""

import jax
import keras
import numpy as np


def local_numpy(x):
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return keras.ops.convert_to_numpy(x)
    # A global array of several processes: this process's shards, once
    # each (a shard replicated on several local devices is listed on each),
    # in batch order.
    shards = {}
    for shard in x.addressable_shards:
        start = shard.index[0].start if shard.index else None
        shards.setdefault((start or 0, str(shard.index)), shard.data)
    parts = [np.asarray(data) for _, data in sorted(shards.items())]
    return np.concatenate(parts, axis=0) if parts[0].ndim else parts[0]


def processes_refusing(refused):
    if jax.process_count() == 1:
        return [0] if refused else []
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(
        np.array([int(bool(refused))], "int32")
    )
    return [int(i) for i in np.flatnonzero(np.asarray(flags).reshape(-1))]
