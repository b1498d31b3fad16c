"""JAX side of `kmodels.backend.table_replicas`."""


def replicate(model, tables):
    raise NotImplementedError(
        "kmodels.distributed.replicate_tables prepares GrowableEmbedding "
        "tables for torch DistributedDataParallel, which needs the torch "
        "backend; the running backend is 'jax'. On JAX, "
        "keras.distribution (DataParallel, shard_embedding_rows) is the "
        "engine (docs/distributed.md)."
    )


def is_replicated(layer):
    # Tables are never marked here (`replicate` raises).
    return False


def largest_id(layer, high):
    return high


def gathered_batch(layer, ids, grads, seen):
    # No replicated tables (`replicate` raises).
    return None
