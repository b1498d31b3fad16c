"""JAX side of `kmodels.backend.gradients`."""

import jax
import keras


def variable_gradients(model, loss_fn, x, y, variables):
    index = {id(v): i for i, v in enumerate(variables)}

    def loss_of(values):
        def pick(v):
            i = index.get(id(v))
            return v.value if i is None else values[i]

        trainable = [pick(v) for v in model.trainable_variables]
        non_trainable = [pick(v) for v in model.non_trainable_variables]
        # The updated non-trainable state is dropped: nothing is written.
        y_pred, _ = model.stateless_call(
            trainable, non_trainable, x, training=True
        )
        return loss_fn(y, y_pred)

    # JAX differentiates the function, not a tape: a variable the loss does
    # not depend on gets an all-zero gradient, never `None`.
    # Jitted: eager JAX would dispatch every op (and retrace every RNN
    # scan) one by one. Nothing in it writes a variable.
    return jax.jit(jax.value_and_grad(loss_of))([v.value for v in variables])


def loss_gradients(model, loss_fn, variables):
    others = [v for v in model.variables if not v.trainable]

    def pure(values):
        mapping = list(zip(variables, values)) + [(v, v.value) for v in others]
        with keras.StatelessScope(state_mapping=mapping):
            return loss_fn()

    # One compiled program: eager JAX retraces every GRU scan per call.
    step = jax.jit(jax.value_and_grad(pure))
    return step([v.value for v in variables])


def gradient_function(model, loss_fn, variables):
    mapped = list(variables)
    ids = {id(v) for v in mapped}
    # Every other variable is an argument too: read inside the trace, its
    # value would be frozen into the compiled program (a gate set to 0
    # after the first call would not be seen).
    others = [v for v in model.variables if id(v) not in ids]

    def loss_of(values, other_values, x, y):
        mapping = list(zip(mapped, values)) + list(zip(others, other_values))
        # Assignments stay in the scope: nothing is written.
        with keras.StatelessScope(state_mapping=mapping):
            return loss_fn(y, model(x, training=True))

    step = jax.jit(jax.value_and_grad(loss_of))

    def run(x, y):
        return step([v.value for v in mapped], [v.value for v in others], x, y)

    return run
