"""`variable_gradients` for the JAX backend (see `gradients.py`)."""

import jax


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
