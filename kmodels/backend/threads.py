"""The size of the backend's CPU thread pool for element-wise and matmul ops.

Small models on a busy CPU lose most of their time to torch's intra-op
threads spinning while they wait for a core: on this 2-core machine under
load, a seq2seq train step (batch 64, units 64) measured 396 ms of CPU with
torch's default 2 threads and 43 ms with one. TensorFlow and JAX fix their
pools when they start (`tf.config.threading`, `XLA_FLAGS`), so only torch
can be changed from a running program.
"""

import keras


def set_intra_op_threads(n):
    """Sets torch's intra-op thread count to `n`; returns whether it applied
    (False on TensorFlow and JAX, whose pools are fixed at start-up)."""
    if keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(int(n))
        return True
    return False
