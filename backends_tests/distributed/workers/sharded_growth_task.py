"""The task of the multi-process JAX growth test: same data, same model in
every process.

Imported by `jax_growth_worker.py` (the processes) and by
`multi_process_test.py`, which trains the one-device reference in the test
session itself. A `GrowableEmbedding` (4 rows, seed 3) feeds a dense head;
the ids of the 4 global batches of 16 rows grow over the epoch (sorted), so
`EmbeddingGrowth` grows the table to 16, 32 and 64 rows inside `fit`.
"""

import keras
import numpy as np

from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding

VOCAB, DIM, EXAMPLES, GLOBAL_BATCH = 40, 8, 64, 16


def data():
    """Sorted int32 ids `(64, 5)` and float32 targets `(64, 1)`."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.integers(0, VOCAB, (EXAMPLES, 5)), axis=0)
    y = rng.normal(size=(EXAMPLES, 1))
    return x.astype("int32"), y.astype("float32")


def build_model():
    """The compiled model (seed 1) and its table, named "table"."""
    keras.utils.set_random_seed(1)
    ids = keras.Input((5,), dtype="int32")
    table = GrowableEmbedding(DIM, initial_capacity=4, seed=3, name="table")
    pooled = keras.layers.GlobalAveragePooling1D()(table(ids))
    model = keras.Model(ids, keras.layers.Dense(1, name="head")(pooled))
    model.compile(keras.optimizers.Adam(0.01), loss="mse")
    return model, table


def train(model, x, y, batch_size):
    """One epoch of `fit` with `EmbeddingGrowth`, in order."""
    model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
