"""Optimizer updates in each backend's fastest form, same numbers.

Keras' torch Adam updates the variables with ten `torch._foreach`
passes over the weights, five of them writing a fresh list of weight-sized
tensors: 35 of the 551 ms of the Seq2Seq train step of `benchmarks` (one
thread, cProfile). torch's fused Adam kernel makes one pass: `apply` over
the Translator's 5.3M parameters took 3.8 against 28.7 ms (one thread,
alternated in one process).
`fuse_adam` installs it on the user's own optimizer object, which keeps its
class, configuration and variables (its moments, its step counter), so
`.keras` files save and load as before. TensorFlow and JAX compile the
update with the step (XLA fuses it): nothing to do there.
"""

from kmodels.backend import native_function

__all__ = ["fuse_adam"]


def fuse_adam(optimizer):
    """Makes `optimizer` (when it is Keras' torch Adam) update through
    torch's fused Adam kernel, with the numbers of Keras' Adam (within
    float32 rounding: 1e-6 over several steps, see
    `backends_tests/backend/optimizers_test.py`).

    The object, its config and its variables are unchanged; only its update
    step runs differently. Where the fused kernel does not apply (AMSGrad,
    variables off the CPU, mixed dtypes, non-constant betas) Keras' own
    update runs, step by step. TensorFlow and JAX: nothing to do (XLA
    fuses the update with the compiled step).

    Args:
        optimizer: a `keras.optimizers.Optimizer`, or `None`.

    Returns:
        True when the fused update was installed (or already was), False
        otherwise.

    Example:

    >>> import keras
    >>> from kmodels.backend import optimizers
    >>> adam = keras.optimizers.Adam(1e-3)
    >>> fused = optimizers.fuse_adam(adam)
    >>> fused == (keras.backend.backend() == "torch")
    True
    """
    fuse = native_function("optimizers", "fuse_adam")
    if optimizer is None or fuse is None:
        return False
    return fuse(optimizer)
