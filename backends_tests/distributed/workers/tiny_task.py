"""The task every multi-process worker trains: same data, same model.

Imported by the worker scripts of this folder (each runs as its own Python
process, so the backend and the device count are its own). Sizes are tiny:
the tests show that the processes agree, not speed.
"""

import keras
import numpy as np

from kmodels.models import transformer_encoder

VOCABULARY_SIZE = 32
SEQUENCE_LENGTH = 12
EXAMPLES = 64
GLOBAL_BATCH = 16
# Plain SGD on both sides: Adam divides by sqrt(v), which turns the
# rounding noise of a zero gradient (attention key biases) into full-size
# steps that differ between any two summation orders (measured 1.8e-3 with
# torch's Adam), and would hide the parity under a loose tolerance.
LEARNING_RATE = 0.1


def data():
    """64 padded id sequences and binary labels, the same in every process.

    Returns:
        `(x, y)`: int32 arrays of shapes `(64, 12)` and `(64,)`.
    """
    rng = np.random.default_rng(7)
    x = rng.integers(1, VOCABULARY_SIZE, (EXAMPLES, SEQUENCE_LENGTH))
    lengths = rng.integers(4, SEQUENCE_LENGTH + 1, (EXAMPLES, 1))
    x = np.where(np.arange(SEQUENCE_LENGTH) < lengths, x, 0)
    y = (x[:, 0] > VOCABULARY_SIZE // 2).astype("int32")
    return x.astype("int32"), y


def build_model():
    """A one-block `transformer_encoder` with seeded weights (seed 0).

    Returns:
        An uncompiled functional `keras.Model` returning 2 logits.
    """
    keras.utils.set_random_seed(0)
    return transformer_encoder(
        keras.layers.Embedding(VOCABULARY_SIZE, 16, mask_zero=True),
        (SEQUENCE_LENGTH,),
        num_classes=2,
        num_heads=2,
        intermediate_dim=16,
    )


def trainable_weights(model):
    """The trainable weights of `model` as float32 NumPy, keyed by path."""
    return {
        v.path: keras.ops.convert_to_numpy(v.value).astype("float32")
        for v in model.trainable_variables
    }
