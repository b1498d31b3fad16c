"""JAX side of `kmodels.backend.rnn`."""


def is_eager_right_padded(mask):
    # `call` is traced: the mask's values are unknown, and XLA's GRU scan
    # has no faster path without a mask.
    return False
