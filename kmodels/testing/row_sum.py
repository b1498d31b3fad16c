"""The smallest model a keyed `GrowableEmbedding` trains in: one id per
example, the prediction the sum of its row's values, MSE, the table's own
SGD. Shared by the eviction and pipeline tests, with its NumPy oracle."""

import keras
import numpy as np

from kmodels.layers import GrowableEmbedding
from kmodels.testing import oracle


def row_sum_table(index, dim, initializer, seed, learning_rate, capacity):
    """A `GrowableEmbedding` named "users" fed by `index`, SGD at
    `learning_rate`, `capacity` rows to start with."""
    return GrowableEmbedding(
        dim,
        initial_capacity=capacity,
        embeddings_initializer=initializer,
        seed=seed,
        optimizer=("sgd", {"learning_rate": learning_rate}),
        key_index=index,
        name="users",
    )


def row_sum_model(table):
    """`(model, table)`: ids `(batch, 1)` int32 -> sum of the row, compiled
    with MSE."""
    ids = keras.Input(shape=(1,), dtype="int32")
    model = keras.Model(ids, keras.ops.sum(table(ids), axis=-1))
    model.compile(optimizer="sgd", loss="mse")
    return model, table


def initial_rows(capacity, dim, initializer, seed, reserved=0):
    """The rows of a table built at `capacity` with the same seed (a row's
    values depend on (seed, row) only), as float64; the first `reserved`
    rows at zeros, as those a table's `key_index` reserves (its
    `first_row`: 1 by default)."""
    layer = GrowableEmbedding(
        dim,
        initial_capacity=capacity,
        embeddings_initializer=initializer,
        seed=seed,
    )
    layer.build()
    rows = keras.ops.convert_to_numpy(layer.embeddings.value)
    rows = rows.astype(np.float64)
    rows[:reserved] = 0.0
    return rows


def sgd_oracle(initial, fed, targets, resets, learning_rate):
    """Plain SGD of the row-sum model on each batch's rows (`fed`), in
    order, restarting the rows `resets[step]` from `initial` before their
    step: dLoss/drow = 2 (sum(row) - target) / batch on every column."""
    table = initial.copy()
    dim = table.shape[1]
    for step, (rows, target) in enumerate(zip(fed, targets)):
        for reset in resets.get(step, []):
            table[reset] = initial[reset]
        pred = table[rows].sum(-1)
        grads = np.repeat(
            (2.0 * (pred - target[:, 0]) / len(rows))[:, None], dim, 1
        )
        table, _ = oracle.sparse_optimizer_step(
            table,
            [],
            step,
            rows,
            grads,
            kind="sgd",
            learning_rate=learning_rate,
        )
    return table
