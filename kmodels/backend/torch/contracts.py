"""PyTorch side of `kmodels.backend.contracts`."""

import keras


def local_numpy(x):
    # A process holds its whole batch (DDP: one batch per process).
    return keras.ops.convert_to_numpy(x)
