"""`variable_gradients` for the JAX backend (see `gradients.py`)."""

import jax


def variable_gradients(model, loss_fn, x, y):
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def loss_of(trainable):
        y_pred, _ = model.stateless_call(
            trainable, non_trainable, x, training=True
        )
        return loss_fn(y, y_pred)

    # JAX differentiates the function, not a tape: a variable the loss does
    # not depend on gets an all-zero gradient, never `None`.
    return jax.value_and_grad(loss_of)(trainable)
