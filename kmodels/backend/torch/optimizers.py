"""torch side of `kmodels.backend.optimizers`."""

import math
import numbers
import struct
import weakref

import torch

from kmodels.backend.torch import keras_internals


def fuse_adam(optimizer):
    if not keras_internals.is_torch_adam(optimizer):
        return False
    if isinstance(keras_internals.adam_update(optimizer), _FusedAdamUpdate):
        return True
    if not hasattr(torch, "_fused_adam_"):
        return False
    keras_internals.set_adam_update(optimizer, _FusedAdamUpdate(optimizer))
    return True


class _FusedAdamUpdate:
    """Keras' Adam update in one pass of torch's fused kernel.

    Keras' Adam adds epsilon to the square root of the second moment
    before the bias correction; torch's after it:

        keras: w -= lr * sqrt(c2) / c1 * m / (sqrt(v) + eps)
        torch: w -= lr / c1 * m / (sqrt(v) / sqrt(c2) + eps')

    with `c1 = 1 - beta_1^t` and `c2 = 1 - beta_2^t`: the same update with
    `eps' = eps / sqrt(c2)`, which this passes each step (and a learning
    rate that makes up for Keras' float32 powers of the betas). The
    moments are updated as Keras does (`m = beta_1 m + (1 - beta_1) g`,
    `v = beta_2 v + (1 - beta_2) g^2`), in the optimizer's own variables.
    Replaces ten `torch._foreach` passes (five of which allocate
    weight-sized lists) by one.

    The optimizer holds this object: it holds the optimizer weakly.
    """

    def __init__(self, optimizer):
        self._optimizer = weakref.ref(optimizer)

    def __call__(self, grads, variables, learning_rate):
        optimizer = self._optimizer()
        params = [v.value for v in variables]
        if not _fusable(optimizer, grads, params):
            keras_update = keras_internals.keras_adam_update(optimizer)
            return keras_update(grads, variables, learning_rate)
        momentums, velocities = keras_internals.adam_slots(optimizer, variables)
        # Keras counts the step after the update: this is step t.
        t = keras_internals.iterations(optimizer) + 1
        beta_1, beta_2 = float(optimizer.beta_1), float(optimizer.beta_2)
        # The kernel's bias corrections, and Keras': it raises the betas
        # to the power t in float32, where 1 - 0.999 is 1.3e-5 off (its
        # moments use the exact 1 - beta). The learning rate passed
        # makes up the difference.
        kernel_1, kernel_2 = 1.0 - beta_1**t, 1.0 - beta_2**t
        keras_1 = 1.0 - _float32(beta_1) ** t
        keras_2 = 1.0 - _float32(beta_2) ** t
        rate = float(learning_rate) * kernel_1 / keras_1
        rate *= math.sqrt(keras_2 / kernel_2)
        step = torch.tensor(float(t), dtype=torch.float32)
        torch._fused_adam_(
            params,
            list(grads),
            momentums,
            velocities,
            [],
            [step] * len(params),
            lr=rate,
            beta1=beta_1,
            beta2=beta_2,
            weight_decay=0.0,
            eps=float(optimizer.epsilon) / math.sqrt(kernel_2),
            amsgrad=False,
            maximize=False,
        )


def _float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def _fusable(optimizer, grads, params):
    if optimizer.amsgrad or not params:
        return False
    if not all(
        isinstance(b, numbers.Real)
        for b in (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon)
    ):
        return False
    dtype = params[0].dtype
    return all(
        p.device.type == "cpu"
        and p.dtype == dtype
        and g is not None
        and g.dtype == dtype
        and g.device == p.device
        and g.shape == p.shape
        for p, g in zip(params, grads)
    ) and dtype in (torch.float32, torch.float64)
