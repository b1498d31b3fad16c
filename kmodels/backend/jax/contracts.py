"""JAX side of `kmodels.backend.contracts`."""

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


def wrap(model, kind, original, check, scope):
    names = _STATE_NAMES[kind]

    def function(state, iterator):
        batches = pull_batches(iterator, model.steps_per_execution)
        try:
            check(batches, kind == "train")
        except Exception:
            # fit/evaluate/predict took the state out of the variables
            # (purged them): put it back, unchanged, so the model stays
            # usable after the refusal.
            model._jax_state = dict(zip(names, state))
            model._jax_state_synced = False
            model.jax_state_sync()
            raise
        with scope():
            return original(state, iter(batches))

    return function
