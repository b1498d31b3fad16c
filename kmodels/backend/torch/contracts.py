"""PyTorch side of `kmodels.backend.contracts`."""

import keras
import torch


def local_numpy(x):
    # A process holds its whole batch (DDP: one batch per process). A
    # tensor is read with `Tensor.numpy()`: `keras.ops.convert_to_numpy`
    # goes through `np.array(tensor)`, which warns once per call under
    # NumPy 2 (torch's `Tensor.__array__` takes no `copy`), on every step.
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return keras.ops.convert_to_numpy(x)
