"""TensorFlow side of `kmodels.backend.replicas`."""

import tensorflow as tf


def sum_over_replicas(x):
    # None in a cross-replica context (e.g. directly under
    # `strategy.scope()`): there `x` already covers everything.
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return x
    return context.all_reduce(tf.distribute.ReduceOp.SUM, x)


def in_replica_function():
    # Under `strategy.scope()` but outside `strategy.run` the context is
    # None (cross-replica); without a strategy there is none to be in.
    return (
        tf.distribute.has_strategy()
        and tf.distribute.get_replica_context() is not None
    )
