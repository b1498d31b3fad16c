"""torch side of `kmodels.backend.losses`."""

import torch


def sparse_cross_entropy(labels, logits):
    # `cross_entropy` takes the classes on axis 1: on 2-D logits that is
    # the last, contiguous axis (moving it to axis 1 of 3-D logits copied
    # them and ran a strided softmax: 39 against 14 ms, value and gradient
    # of (64, 20, 5000) logits).
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1).long(),
        reduction="none",
    )
    return loss.reshape(labels.shape)


def real_positions(mask):
    return torch.nonzero(mask).reshape(-1)


def prefers_fused_loss():
    return True
