"""torch side of `kmodels.backend.gradients`."""

import keras
import torch


def _grad(loss, inputs):
    """`torch.autograd.grad(loss, inputs, allow_unused=True)`, with `None`
    for every input where the loss depends on none (no input at all, a
    model without trainable variables, or a loss of constants): what
    TensorFlow's tape reports, where torch would raise `RuntimeError`."""
    if not inputs or not loss.requires_grad:
        return tuple(None for _ in inputs)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


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
        grads = _grad(loss, params)
    finally:
        for p in switched:
            p.requires_grad_(False)
    return loss.detach(), grads


def loss_gradients(model, loss_fn, variables):
    loss = loss_fn()
    # `allow_unused=True`: `None` for a variable the loss does not depend on.
    grads = _grad(loss, [v.value for v in variables])
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
        grads = _grad(loss, values)
        return loss.detach(), grads

    return run
