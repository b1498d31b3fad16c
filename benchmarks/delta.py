"""Delta export: the size of `GrowableEmbedding.delta(since=mark)` against
the whole table, for 1% and 10% of the rows changed, and the time a delta
takes to build."""

import time

import numpy as np

from benchmarks.child import require
from benchmarks.timing import summarize


def delta_export(sizes, timing):
    """A keyed table of `rows` rows in use (int64 keys, dim `dim`, SGD:
    no slots; built with twice the rows, so that no growth is timed) is
    marked, then a fraction of its rows changes (warm-started with
    `assign`, which stamps rows as training does; a tenth of them for new
    keys, evicting none: the index is unbounded) and the delta since the
    mark is built. Reported: the delta's bytes for 1% and 10% of the rows
    (`delta_bytes_1pct`, `delta_bytes_10pct`), the full table's bytes
    (the rows in use and their int64 keys, what a full publish ships) and
    their ratios; the time is the median time of `delta()` at 10%. The
    delta follows the rows changed: 10x the bytes for 10x the rows, the
    same ratio at every table size."""
    import keras

    GrowableEmbedding, KeyIndex = require(
        "kmodels.layers", "GrowableEmbedding", "KeyIndex"
    )
    rows, dim = sizes["rows"], sizes["dim"]
    keras.utils.set_random_seed(0)
    index = KeyIndex("int64")
    table = GrowableEmbedding(
        dim, initial_capacity=2 * rows, key_index=index, optimizer="sgd"
    )
    table.build()
    index.lookup(np.arange(10**12, 10**12 + rows - 1))
    # A full publish: the rows in use and their keys.
    full_bytes = index.num_rows * dim * 4 + len(index) * 8
    rng = np.random.default_rng(0)
    next_key = [2 * 10**12]
    result = {"full_bytes": full_bytes, "rows": rows}
    times = []

    def changed_delta(fraction):
        count = max(1, int(rows * fraction))
        fresh = max(1, count // 10)
        old = 10**12 + rng.choice(rows - 1, count - fresh, replace=False)
        new = np.arange(next_key[0], next_key[0] + fresh)
        next_key[0] += fresh
        keys = np.concatenate([old, new])
        mark = table.mark()
        table.assign(keys, rng.standard_normal((len(keys), dim)))
        t0 = time.perf_counter()
        change = table.delta(since=mark)
        elapsed = time.perf_counter() - t0
        if len(change.rows) != count or len(change.keys_added) != fresh:
            raise RuntimeError(
                f"expected {count} rows and {fresh} keys in the delta; got "
                f"{len(change.rows)} and {len(change.keys_added)}"
            )
        return change.nbytes, elapsed

    for name, fraction in (("1pct", 0.01), ("10pct", 0.1)):
        nbytes, _ = changed_delta(fraction)
        result[f"delta_bytes_{name}"] = nbytes
        result[f"ratio_{name}"] = nbytes / full_bytes
    for _ in range(timing["min_steps"]):
        times.append(changed_delta(0.1)[1])
    result.update(summarize(times))
    return dict(result, flops=0)
