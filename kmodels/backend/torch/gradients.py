"""torch side of `kmodels.backend.gradients`."""

import keras
import torch


def variable_gradients(model, loss_fn, x, y, variables):
    params = [v.value for v in variables]
    # Non-trainable variables (GrowableEmbedding tables) are parameters
    # without `requires_grad`: switched on for this call only.
    switched = [p for p in params if not p.requires_grad]
    try:
        for p in switched:
            p.requires_grad_(True)
        loss = loss_fn(y, model(x, training=True))
        # `allow_unused=True`: `None` for a variable the loss does not depend
        # on. `torch.autograd.grad` leaves the parameters' `.grad` untouched.
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    finally:
        for p in switched:
            p.requires_grad_(False)
    return loss.detach(), grads


def loss_gradients(model, loss_fn, variables):
    loss = loss_fn()
    # `allow_unused=True`: `None` for a variable the loss does not depend on.
    grads = torch.autograd.grad(
        loss, [v.value for v in variables], allow_unused=True
    )
    return loss, grads


def gradient_function(model, loss_fn, variables):
    mapped = list(variables)

    def run(x, y):
        # Leaves that share the variables' storage: the parameters' `.grad`
        # and `requires_grad` stay untouched.
        values = [v.value.detach().requires_grad_(True) for v in mapped]
        # Assignments stay in the scope: nothing is written.
        with keras.StatelessScope(state_mapping=list(zip(mapped, values))):
            loss = loss_fn(y, model(x, training=True))
        grads = torch.autograd.grad(loss, values, allow_unused=True)
        return loss.detach(), grads

    return run
