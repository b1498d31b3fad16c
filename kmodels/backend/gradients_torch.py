"""`variable_gradients` for the torch backend (see `gradients.py`)."""

import torch


def variable_gradients(model, loss_fn, x, y):
    params = [v.value for v in model.trainable_variables]
    loss = loss_fn(y, model(x, training=True))
    # `allow_unused=True`: `None` for a variable the loss does not depend on.
    # `torch.autograd.grad` leaves the parameters' `.grad` untouched.
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return loss.detach(), grads
