"""The growable-table task of the torch DDP test: same data, same model in
every process.

Imported by `torch_ddp_tables_worker.py` (the DDP ranks) and by
`replicated_tables_test.py`, which trains the one-process reference in the
test session itself (one process fewer to start).

The model embeds two features and regresses one number from them:
- `ids`: raw ids, an unbounded table that grows from 4 rows as the ids
  grow (step t draws ids below 5 + 9t): 8, 16, 32, then 64 rows;
- `keys`: bags of 1 to 4 int64 keys (padded with 0, row 0, masked;
  `combiner="mean"`) through a bounded `KeyIndex` (20 rows, LRU), from a
  window of 16 keys sliding by 4 per step, so keys are evicted and their
  rows restarted.
Both tables train with their own sparse Adam, the dense head with SGD.
"""

import keras
import numpy as np

import kmodels

STEPS = 6
GLOBAL_BATCH = 16
BAG = 4
LEARNING_RATE = 0.1
INDEX_ROWS = 20


def data():
    """Per step: raw ids `(n, 4)` int32, int64 keys `(n, 4)`, targets
    `(n, 1)` float32, `n` = 16 rows but 15 in the last step; the same in
    every process."""
    rng = np.random.default_rng(11)
    steps = []
    for t in range(STEPS):
        # The last batch is short: 2 ranks get 8 and 7 rows, 4 ranks 4, 4,
        # 4 and 3.
        n = GLOBAL_BATCH - (t == STEPS - 1)
        ids = rng.integers(0, 5 + 9 * t, (n, BAG))
        keys = 10**12 + 7919 * rng.integers(4 * t, 4 * t + 16, (n, BAG))
        # Bags of 1 to 4 keys, padded with key 0 (row 0, masked).
        keys[np.arange(BAG) >= rng.integers(1, BAG + 1, (n, 1))] = 0
        y = rng.normal(size=(n, 1))
        steps.append((ids.astype("int32"), keys, y.astype("float32")))
    return steps


def build_model():
    """The model (seed 0; every layer named, so that variable paths agree
    between processes) and its tables and key index.

    Returns:
        `(model, grown, bounded, index)`.
    """
    keras.utils.set_random_seed(0)
    ids = keras.Input((BAG,), dtype="int32", name="ids")
    rows = keras.Input((BAG,), dtype="int32", name="rows")
    adam = ("adam", {"learning_rate": 0.05})
    grown = kmodels.layers.GrowableEmbedding(
        8, initial_capacity=4, optimizer=adam, name="grown"
    )
    index = kmodels.layers.KeyIndex(
        max_capacity=INDEX_ROWS, eviction="lru", name="index"
    )
    bounded = kmodels.layers.GrowableEmbedding(
        8,
        initial_capacity=4,
        optimizer=adam,
        key_index=index,
        combiner="mean",
        mask_zero=True,
        name="bounded",
    )
    pooled = keras.layers.GlobalAveragePooling1D()(grown(ids))
    features = keras.layers.Concatenate()([pooled, bounded(rows)])
    head = keras.layers.Dense(1, name="head")
    model = keras.Model([ids, rows], head(features))
    return model, grown, bounded, index


def rank_rows(rank, world_size):
    """The rows of a global batch that `rank` trains: rank r the r-th run
    of `GLOBAL_BATCH // world_size`, the last rank what is left."""
    local = GLOBAL_BATCH // world_size
    stop = None if rank == world_size - 1 else (rank + 1) * local
    return slice(rank * local, stop)


def per_rank_mse(world_size):
    """The loss DDP trains with `world_size` ranks: the mean over the ranks
    of each rank's mean squared error (the plain mean when every rank holds
    the same number of rows, not in the short last batch)."""
    parts = [rank_rows(rank, world_size) for rank in range(world_size)]

    def loss(y_true, y_pred):
        return keras.ops.mean(
            keras.ops.stack(
                [
                    keras.ops.mean(keras.ops.square(y_pred[p] - y_true[p]))
                    for p in parts
                ]
            )
        )

    return loss


def global_rows(index, table, keys):
    """Rows of a global batch's `keys`: the same on every process when
    each looks up the whole global batch in the same order; restarts the
    rows of evicted keys (values and optimizer slots) before the step."""
    rows = np.zeros(keys.shape, "int32")
    real = keys != 0
    rows[real] = index.lookup(keys[real])
    table.reset_rows(index.take_reset_rows())
    return rows


def record(model, grown, bounded, index, prefix="weights"):
    """Every variable (by path), the growth logs and the index's keys."""
    found = {
        f"{prefix}/{v.path}": keras.ops.convert_to_numpy(v.value)
        for v in model.variables
    }
    found["grown_log"] = np.array([e["to"] for e in grown.growth_log])
    found["bounded_log"] = np.array([e["to"] for e in bounded.growth_log])
    found["keys"] = np.array(index.keys(), np.int64)
    found["evictions"] = index.evictions
    return found


def train_reference(world_size=2):
    """One process, plain Keras: `train_on_batch` on each global batch (the
    Keras optimizer applies the dense head and the tables' step counters),
    with the loss DDP trains with `world_size` ranks (`per_rank_mse`).

    Returns:
        `record(...)` after training, with the initial variables under
        `initial/`.
    """
    model, grown, bounded, index = build_model()
    model.compile(
        keras.optimizers.SGD(LEARNING_RATE), loss=per_rank_mse(world_size)
    )
    initial = record(model, grown, bounded, index, prefix="initial")
    for ids, keys, y in data():
        rows = global_rows(index, bounded, keys)
        model.train_on_batch([ids, rows], y)
    found = record(model, grown, bounded, index)
    found.update({k: v for k, v in initial.items() if "/" in k})
    return found
