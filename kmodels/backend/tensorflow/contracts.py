"""TensorFlow side of `kmodels.backend.contracts`."""

import keras
import numpy as np
import tensorflow as tf


def local_numpy(x):
    if isinstance(x, tf.distribute.DistributedValues):
        # A batch a strategy split between its replicas: the replicas'
        # parts, in order, make the batch.
        parts = [keras.ops.convert_to_numpy(v) for v in x.values]
        return np.concatenate(parts, axis=0) if parts[0].ndim else parts[0]
    return keras.ops.convert_to_numpy(x)
