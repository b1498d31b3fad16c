"""PyTorch side of `kmodels.backend.contracts`."""

import keras


def local_numpy(x):
    # A process holds its whole batch (DDP: one batch per process).
    return keras.ops.convert_to_numpy(x)


def wrap(model, kind, original, check, scope):
    # Called with the list of batches of one execution.
    def function(data):
        check(list(data), kind == "train")
        with scope():
            return original(data)

    return function
