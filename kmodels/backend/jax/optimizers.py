"""JAX side of `kmodels.backend.optimizers`."""


def fuse_adam(optimizer):
    # XLA fuses Keras' Adam update with the compiled step.
    return False
