"""JAX side of `kmodels.backend.contracts`."""

import jax
import keras
import numpy as np

from kmodels.backend.common.batches import pull_batches

_STATE_NAMES = {
    "train": (
        "trainable_variables",
        "non_trainable_variables",
        "optimizer_variables",
        "metrics_variables",
    ),
    "test": (
        "trainable_variables",
        "non_trainable_variables",
        "metrics_variables",
    ),
    "predict": ("trainable_variables", "non_trainable_variables"),
}


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


def _put_back(model, names, state):
    """fit/evaluate/predict took the state out of the variables (purged
    them): puts it back, unchanged, so the model stays usable after a
    refusal. A step that failed while running has given its (donated)
    buffers away: nothing is left to put back then."""
    leaves = jax.tree_util.tree_leaves(state)
    if any(isinstance(x, jax.Array) and x.is_deleted() for x in leaves):
        return
    model._jax_state = dict(zip(names, state))
    model._jax_state_synced = False
    model.jax_state_sync()


def wrap(model, kind, original, check, scope):
    names = _STATE_NAMES[kind]

    def function(state, iterator):
        batches = pull_batches(iterator, model.steps_per_execution)
        try:
            check(batches, kind == "train")
            with scope():
                # An error raised while the step is traced (a layer's
                # refusal) leaves the state untouched as well.
                return original(state, iter(batches))
        except Exception:
            _put_back(model, names, state)
            raise

    return function
