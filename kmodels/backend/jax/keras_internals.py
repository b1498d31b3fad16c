"""The JAX half of `kmodels.backend.keras_internals`: the internals of
Keras' JAX trainer and naming that kmodels relies on, each behind one
function (see that module for the version pin)."""

from keras.src.backend.common.name_scope import current_path as _current_path
from keras.src.backend.common.stateless_scope import get_stateless_scope

# The state of a step, by kind, in the order Keras' JAX trainer passes it.
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


def current_path():
    """The name-scope path a variable created now would get (its layout
    under `keras.distribution` depends on it). Keras exports no reader of
    the current name scope."""
    return _current_path()


def set_jax_state(model, kind, state):
    """Writes the state of a running `kind` step (`"train"`, `"test"`,
    `"predict"`) back into the model's variables. While an epoch runs,
    Keras' JAX trainer keeps the state outside the variables, privately;
    its public `jax_state_sync` writes only what it holds privately."""
    model._jax_state = dict(zip(_STATE_NAMES[kind], state))
    model._jax_state_synced = False
    model.jax_state_sync()


def take_jax_state(model, kind):
    """The state of a `kind` step read from the model's variables, taken
    out of them as Keras' trainer does during an epoch (purged), and
    recorded as the trainer's current state (the arrays a variable held
    may have been donated: the trainer must not sync those). Keras reads
    it with a private method."""
    state = tuple(
        model._get_jax_state(
            trainable_variables=True,
            non_trainable_variables=True,
            optimizer_variables=kind == "train",
            metrics_variables=kind != "predict",
            purge_model_variables=True,
        )
    )
    model._jax_state = dict(zip(_STATE_NAMES[kind], state))
    model._jax_state_synced = False
    return state


def trim_jax_state(model, cut):
    """Cuts the rows past each trainable variable's own shape off the
    running train state Keras' trainer holds (`_jax_state`), before it is
    written back: the growth hook passes tables padded beyond their
    capacity to the step (`kmodels.backend.jax.growth.pad_step_state`).
    `cut(value, rows)` returns the first `rows` rows of `value`."""
    state = getattr(model, "_jax_state", None)
    if not state or model._jax_state_synced:
        return
    values = state.get("trainable_variables")
    if not values:
        return
    trimmed = []
    for variable, value in zip(model.trainable_variables, values):
        rows = variable.shape[0] if variable.shape else None
        if rows is not None and value.shape and value.shape[0] > rows:
            value = cut(value, rows)
        trimmed.append(value)
    state["trainable_variables"] = trimmed


def stateless_value(variable):
    """The value a `keras.StatelessScope` (Keras' JAX trainer tracing a
    step) gives `variable`, or `None` outside one or when it gives none.
    Unlike `variable.value`, never runs the initializer of a variable the
    trainer purged."""
    scope = get_stateless_scope()
    return None if scope is None else scope.get_current_value(variable)


def override_state_sync(model, sync):
    """Makes `model.jax_state_sync()` (Keras' JAX trainer writing the
    running state back into the variables: at epoch ends, for callbacks)
    call `sync` on this instance; returns the undo. Keras offers no hook
    before it writes the state back, and the trainer calls the method on
    the instance, which is a Keras class kmodels does not own."""
    model.__dict__["jax_state_sync"] = sync

    def undo():
        if model.__dict__.get("jax_state_sync") is sync:
            del model.__dict__["jax_state_sync"]

    return undo
