"""TensorFlow side of `kmodels.backend.contracts`."""

import keras
import numpy as np
import tensorflow as tf

from kmodels.backend.common.batches import pull_batches


def local_numpy(x):
    if isinstance(x, tf.distribute.DistributedValues):
        # A batch a strategy split between its replicas: the replicas'
        # parts, in order, make the batch.
        parts = [keras.ops.convert_to_numpy(v) for v in x.values]
        return np.concatenate(parts, axis=0) if parts[0].ndim else parts[0]
    return keras.ops.convert_to_numpy(x)


def wrap(model, kind, original, check, scope):
    if kind == "predict":
        # Called with the list of batches of one execution.
        def function(data):
            check(list(data), False)
            with scope():
                return original(data)

        return function

    def function(iterator):
        batches = pull_batches(iterator, model.steps_per_execution)
        check(batches, kind == "train")
        with scope():
            # A Python iterator: Keras runs its compiled one-batch step on
            # each batch.
            return original(iter(batches))

    return function
