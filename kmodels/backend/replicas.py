"""Sums over the replicas of a data-parallel step.

Under `tf.distribute` (TensorFlow backend), `model.fit` runs the train step
once per replica on that replica's slice of the global batch and sums the
replicas' gradients. Keras divides a loss by the number of replicas only
when it reduces per-example values itself; a loss function that returns a
scalar is left as it is. A loss normalised by a count that depends on the
data (real tokens) must therefore divide by the count over all replicas to
give the gradients of the global batch. JAX (`keras.distribution`: one SPMD
program over the global batch) and torch see the global batch already:
there the sum is the identity.

A count summed this way may be 0 on every replica (a global batch without
a real token); the caller guards the division (`masked_loss` divides by 1
there, so its loss and gradients are 0). A replica whose own count is 0
while others have some contributes a zero numerator, never NaN.
"""

from kmodels.backend import native_function


def sum_over_replicas(x):
    """Sums `x` over the replicas of the running `tf.distribute` step.

    Args:
        x: a tensor computed by each replica (e.g. its number of tokens).

    Returns:
        The sum of `x` over all replicas, the same on each; `x` itself
        outside a multi-replica step and on JAX and torch.

    Example:
    >>> import keras
    >>> from kmodels.backend.replicas import sum_over_replicas
    >>> float(sum_over_replicas(keras.ops.convert_to_tensor(3.0)))
    3.0
    """
    total = native_function("replicas", "sum_over_replicas")
    return x if total is None else total(x)


def in_replica_function():
    """True inside the function a `tf.distribute` strategy runs on each
    replica (`strategy.run`; eagerly, each replica runs in a thread of its
    own); False elsewhere and on JAX and torch."""
    inside = native_function("replicas", "in_replica_function")
    return False if inside is None else inside()
