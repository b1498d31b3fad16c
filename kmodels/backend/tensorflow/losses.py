"""TensorFlow side of `kmodels.backend.losses`."""

import tensorflow as tf


def sparse_cross_entropy(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, "int32"), logits=logits
    )
