"""Gradients of a scalar loss with respect to a model's trainable variables.

`loss_gradients(model, loss_fn)` calls `loss_fn()` (which calls `model`) and
returns one NumPy array per `model.trainable_variables` entry (zeros where
the loss does not depend on a variable; JAX reports those as zeros, TF and
torch as None, which is unified here), using `tf.GradientTape`,
`jax.grad` over `model.stateless_call`-style variable values, or
`torch.autograd.grad`.
"""

import keras
import numpy as np


def loss_gradients(model, loss_fn):
    variables = list(model.trainable_variables)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = tape.gradient(loss, [v.value for v in variables])
    elif backend == "jax":
        import jax

        others = [v for v in model.variables if not v.trainable]

        def pure(values):
            mapping = list(zip(variables, values)) + [
                (v, v.value) for v in others
            ]
            with keras.StatelessScope(state_mapping=mapping):
                return loss_fn()

        # One compiled program: eager JAX retraces every GRU scan per call.
        step = jax.jit(jax.value_and_grad(pure))
        loss, grads = step([v.value for v in variables])
    else:
        import torch

        loss = loss_fn()
        grads = torch.autograd.grad(
            loss, [v.value for v in variables], allow_unused=True
        )
    out = []
    for v, g in zip(variables, grads):
        if g is None:
            out.append(np.zeros(tuple(v.shape), "float32"))
        else:
            out.append(np.asarray(keras.ops.convert_to_numpy(g)))
    return float(keras.ops.convert_to_numpy(loss)), out
