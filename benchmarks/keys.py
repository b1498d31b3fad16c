"""KeyIndex throughput: raw keys to rows, in keys/s, for int64 and string
keys, next to the per-key loop `KeyIndex.lookup` used before it was
vectorised (kept below, verbatim apart from `self` -> `index` and
`self._refuse(...)` -> `_refuse(index, ...)`, as the baseline).

The batch: `keys` draws (uniform) from `distinct` keys, half of which the
index already holds (it holds `distinct` keys in all), so a step both reads
known rows and adds new keys. Every timed step starts from a fresh index
(built untimed); the vectorised cases check once that they assign exactly
the baseline's rows. Each record also holds `cpu_ms`, the median CPU time
of the process per step.

The `stream_*` cases time bounded indexes (`max_capacity`, LRU or LFU
eviction) on a stream of 512-key batches, next to an unbounded index on
the same stream (see "bounded indexes" below).
"""

import time

import numpy as np

from benchmarks.child import require
from benchmarks.timing import measure_alternating
from benchmarks.timing import summarize

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


# ------------------------------------------------- the loop, as it was
def _refuse(index, error, key, position, expected):
    """Raises `KeyIndex`'s error for a refused key (its message lives in
    `kmodels.growable.key_batch` since the index was split)."""
    refuse = require("kmodels.growable.key_batch", "refuse")
    refuse(index.name, error, key, position, expected)


def _loop_int_keys(index, keys):
    if keys.dtype.kind in "iu":
        if keys.size and keys.dtype.kind == "u":
            top = keys.reshape(-1).argmax()
            if int(keys.reshape(-1)[top]) > _INT64_MAX:
                _refuse(
                    index,
                    ValueError,
                    keys.reshape(-1)[top],
                    int(top),
                    "int64 keys, in [-2**63, 2**63)",
                )
        return keys.reshape(-1).tolist()
    raw = flat = keys.reshape(-1).tolist()
    if not all(type(key) is int for key in raw):
        for i, key in enumerate(raw):
            if isinstance(key, (bool, np.bool_)) or not isinstance(
                key, (int, np.integer)
            ):
                _refuse(index, TypeError, key, i, "int64 keys")
        flat = [int(key) for key in raw]
    if flat and (min(flat) < _INT64_MIN or max(flat) > _INT64_MAX):
        for i, key in enumerate(flat):
            if not _INT64_MIN <= key <= _INT64_MAX:
                _refuse(
                    index,
                    ValueError,
                    raw[i],
                    i,
                    "int64 keys, in [-2**63, 2**63)",
                )
    return flat


def _loop_string_keys(index, keys):
    flat = keys.reshape(-1).tolist()
    if not all(type(key) is str for key in flat):
        for i, key in enumerate(flat):
            if isinstance(key, bytes):
                try:
                    flat[i] = key.decode("utf-8")
                except UnicodeDecodeError:
                    _refuse(
                        index, ValueError, key, i, "string keys (UTF-8 bytes)"
                    )
            elif isinstance(key, str):
                flat[i] = str(key)
            else:
                _refuse(index, TypeError, key, i, "string keys")
    try:
        "".join(flat).encode("utf-8")
    except UnicodeEncodeError:
        for i, key in enumerate(flat):
            try:
                key.encode("utf-8")
            except UnicodeEncodeError:
                _refuse(
                    index,
                    ValueError,
                    key,
                    i,
                    "string keys encodable as UTF-8 (no lone surrogates)",
                )
    return flat


def loop_lookup(index, keys, grow=None):
    """`KeyIndex.lookup` before vectorisation: a Python pass per key."""
    if grow is None:
        grow = not index.frozen
    if grow and index.frozen:
        raise ValueError(f"KeyIndex '{index.name}' is frozen.")
    if not isinstance(keys, np.ndarray) or keys.dtype.kind == "b":
        keys = np.asarray(keys, dtype=object)
    shape = keys.shape
    if index.key_dtype == "string":
        flat = _loop_string_keys(index, keys)
    else:
        flat = _loop_int_keys(index, keys)
    rows = index._rows
    if grow:
        new = dict.fromkeys(key for key in flat if key not in rows)
        start = index.first_row + len(rows)
        rows.update(zip(new, range(start, start + len(new))))
        found = list(map(rows.__getitem__, flat))
    else:
        found = [rows.get(key, index.oov_row) for key in flat]
        if index.oov_row is None and None in found:
            key = flat[found.index(None)]
            raise KeyError(
                f"KeyIndex '{index.name}' is frozen and has no row "
                f"for key {key!r}."
            )
    return np.array(found, dtype=np.int64).reshape(shape)


# ------------------------------------------------------------- the cases
def _workload(sizes, key_dtype):
    """`(held, batch)`: the keys the index holds before a step and the
    batch (an int64 array, or a list of `str`)."""
    rng = np.random.default_rng(0)
    distinct = sizes["distinct"]
    ids = rng.integers(0, distinct, size=sizes["keys"])
    held = np.arange(distinct // 2, distinct // 2 + distinct)
    if key_dtype == "int64":
        # Sparse 64-bit ids, as raw user or item ids are.
        spread = np.int64(0x9E3779B97F4A7C1)
        return held * spread, ids * spread
    return [f"user-{i:09d}" for i in held.tolist()], [
        f"user-{i:09d}" for i in ids.tolist()
    ]


def _timed(timing, run, setup=lambda: None):
    """Wall and CPU seconds of `run(setup())` per timed step (the setup
    untimed), after `timing["warmup"]` untimed steps, until `min_steps`
    steps and `max_seconds` have passed (or `max_steps`)."""
    times, cpu_times = [], []
    start = time.perf_counter()
    for step in range(timing["warmup"] + timing["max_steps"]):
        state = setup()
        t0, c0 = time.perf_counter(), time.process_time()
        run(state)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - c0
        if step < timing["warmup"]:
            start = time.perf_counter()
            continue
        times.append(elapsed)
        cpu_times.append(cpu)
        if (
            len(times) >= timing["min_steps"]
            and time.perf_counter() - start > timing["max_seconds"]
        ):
            break
    return times, cpu_times


def _throughput(sizes, timing, key_dtype, lookup):
    KeyIndex = require("kmodels.layers", "KeyIndex")
    held, batch = _workload(sizes, key_dtype)

    def fresh():
        index = KeyIndex(key_dtype)
        index.lookup(held)
        return index

    times, cpu_times = _timed(
        timing, lambda index: lookup(index, batch), setup=fresh
    )
    # The process's CPU time too: on a shared machine it says what one free
    # core would do.
    cpu_ms = summarize(cpu_times)["median_ms"]
    return dict(summarize(times), keys=sizes["keys"], cpu_ms=cpu_ms, flops=0)


def _checked(sizes, key_dtype):
    """The vectorised lookup assigns the loop's rows (and keys)."""
    KeyIndex = require("kmodels.layers", "KeyIndex")
    held, batch = _workload(sizes, key_dtype)
    indexes = [KeyIndex(key_dtype), KeyIndex(key_dtype)]
    for index in indexes:
        index.lookup(held)
    new = indexes[0].lookup(batch)
    old = loop_lookup(indexes[1], batch)
    if not np.array_equal(new, old) or indexes[0].keys() != indexes[1].keys():
        raise RuntimeError("KeyIndex.lookup assigns other rows than the loop")


def loop_int64(sizes, timing):
    """The per-key loop on int64 keys (NumPy int64 batch)."""
    return _throughput(sizes, timing, "int64", loop_lookup)


def vectorised_int64(sizes, timing):
    """`KeyIndex.lookup` on int64 keys (NumPy int64 batch)."""
    _checked(sizes, "int64")
    return _throughput(
        sizes, timing, "int64", lambda index, keys: index.lookup(keys)
    )


def loop_string(sizes, timing):
    """The per-key loop on string keys (a list of `str`)."""
    return _throughput(sizes, timing, "string", loop_lookup)


def vectorised_string(sizes, timing):
    """`KeyIndex.lookup` on string keys (a list of `str`)."""
    _checked(sizes, "string")
    return _throughput(
        sizes, timing, "string", lambda index, keys: index.lookup(keys)
    )


# ------------------------------------------------------- bounded indexes
# A stream of small batches (`_STREAM_BATCH` keys each, drawn uniformly from
# `distinct` ids, or from `2 * max_capacity` when that is more, so that a
# large index keeps evicting) through one index, in steady state: the timed
# step looks up `keys` keys, batch by batch. The bounded indexes start full,
# of keys the stream never holds, so every new key of the stream evicts
# one; the unbounded index on `distinct` ids is the baseline.
_STREAM_BATCH = 512


def _stream(sizes, max_capacity):
    rng = np.random.default_rng(1)
    spread = np.int64(0x9E3779B97F4A7C1)
    ids = max(sizes["distinct"], 2 * (max_capacity or 0))
    ids = rng.integers(0, ids, size=sizes["keys"]) * spread
    return [
        ids[start : start + _STREAM_BATCH]
        for start in range(0, ids.size, _STREAM_BATCH)
    ]


def _full_index(max_capacity, eviction):
    """A `KeyIndex` holding `max_capacity - 1` keys (negative ids, which
    the stream never draws), or an empty unbounded one."""
    KeyIndex = require("kmodels.layers", "KeyIndex")
    index = KeyIndex(max_capacity=max_capacity, eviction=eviction)
    if max_capacity is not None:
        held = -1 - np.arange(max_capacity - 1, dtype=np.int64)
        for start in range(0, held.size, 65_536):
            index.lookup(held[start : start + 65_536])
    return index


def _stream_throughput(sizes, timing, max_capacity, eviction):
    batches = _stream(sizes, max_capacity)
    index = _full_index(max_capacity, eviction)

    def run(_):
        for batch in batches:
            index.lookup(batch)

    times, cpu_times = _timed(timing, run)
    if max_capacity is not None and index.num_rows > max_capacity:
        raise RuntimeError("a bounded KeyIndex outgrew its max_capacity")
    cpu_ms = summarize(cpu_times)["median_ms"]
    return dict(
        summarize(times),
        keys=sizes["keys"],
        cpu_ms=cpu_ms,
        flops=0,
        evictions=index.evictions,
    )


def stream_unbounded(sizes, timing):
    """`KeyIndex.lookup`, unbounded, on a stream of 512-key batches."""
    return _stream_throughput(sizes, timing, None, None)


def stream_lru_1k(sizes, timing):
    """The stream through a full LRU index of 1,000 rows."""
    return _stream_throughput(sizes, timing, 1000, "lru")


def stream_lfu_1k(sizes, timing):
    """The stream through a full LFU index of 1,000 rows."""
    return _stream_throughput(sizes, timing, 1000, "lfu")


def stream_lru_1m(sizes, timing):
    """The stream (2M ids) through a full LRU index of 1,000,000 rows."""
    return _stream_throughput(sizes, timing, 1_000_000, "lru")


def stream_lfu_1m(sizes, timing):
    """The stream (2M ids) through a full LFU index of 1,000,000 rows."""
    return _stream_throughput(sizes, timing, 1_000_000, "lfu")


def stream_ttl(sizes, timing):
    """The unbounded stream through an index with `ttl=50` (growing
    lookups): in steady state each lookup expires about as many keys as
    it admits, each one freeing a row and queueing it for reset."""
    KeyIndex = require("kmodels.layers", "KeyIndex")
    batches = _stream(sizes, None)
    index = KeyIndex(ttl=50)

    def run(_):
        for batch in batches:
            index.lookup(batch)

    times, cpu_times = _timed(timing, run)
    return dict(
        summarize(times),
        keys=sizes["keys"],
        cpu_ms=summarize(cpu_times)["median_ms"],
        flops=0,
        expirations=index.expirations,
    )


# ------------------------------------------------- the lock's own cost
# `KeyIndex` holds a lock while it looks a batch up (threads, `PyDataset`
# workers). Its single-thread cost, on small batches where it weighs most
# (64 keys: a `PyDataset` batch), timed in alternation with the same index
# whose lock is replaced by a no-op one.
_LOCK_BATCH = 64


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def stream_unlocked(sizes, timing):
    """The unbounded stream in 64-key batches, without the index's lock,
    in alternation with the locked index (`locked_ms`); both indexes see
    the same batches and must give the same rows."""
    rng = np.random.default_rng(2)
    spread = np.int64(0x9E3779B97F4A7C1)
    ids = rng.integers(0, sizes["distinct"], size=sizes["keys"]) * spread
    batches = [
        ids[start : start + _LOCK_BATCH]
        for start in range(0, ids.size, _LOCK_BATCH)
    ]
    locked = _full_index(None, None)
    unlocked = _full_index(None, None)
    # The instance attribute `KeyIndex` takes for its lock (a plain
    # attribute: Keras does not track it).
    object.__setattr__(unlocked, "_index_lock", _NoLock())

    def run(index):
        return lambda: [index.lookup(batch) for batch in batches]

    off, on = measure_alternating(run(unlocked), run(locked), timing)
    if locked.keys() != unlocked.keys():
        raise RuntimeError("the lock changed what KeyIndex.lookup assigns")
    return dict(off, keys=sizes["keys"], flops=0, locked_ms=on["median_ms"])
