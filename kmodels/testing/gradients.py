"""Gradients of a scalar loss with respect to a model's trainable variables.

`loss_gradients(model, loss_fn)` calls `loss_fn()` (which calls `model`) and
returns one NumPy array per `model.trainable_variables` entry (zeros where
the loss does not depend on a variable; JAX reports those as zeros, TF and
torch as None, which is unified here), using `tf.GradientTape`,
`jax.grad` over `model.stateless_call`-style variable values, or
`torch.autograd.grad` (`kmodels.backend.gradients.loss_gradients`).
"""

import numpy as np

from kmodels.backend import gradients


def loss_gradients(model, loss_fn):
    loss, grads = gradients.loss_gradients(model, loss_fn)
    out = []
    for v, g in zip(model.trainable_variables, grads):
        if g is None:
            out.append(np.zeros(tuple(v.shape), "float32"))
        else:
            out.append(np.asarray(g))
    return loss, out
