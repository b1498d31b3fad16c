"""Time-to-live of a `KeyIndex` (`ttl`, `ttl_seconds` with an injected
clock): expiry, the rows it frees and resets, with and without a bound,
eviction and `min_count`, its saved state, its arguments, and a table in
`model.fit` restarting the rows of expired keys.

`_Reference` below is an independent simulator of the documented rules,
written for clarity (lists, a full scan per lookup): `KeyIndex` must give
its rows, keys, expiries and reset rows exactly, batch after batch.
"""

import copy
import math
import re
import threading
import time

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.growable import admission
from kmodels.growable import key_index_state
from kmodels.growable.saved_state import entry_checksums
from kmodels.layers import EvictionPolicy
from kmodels.layers import KeyIndex
from kmodels.testing.row_sum import initial_rows
from kmodels.testing.row_sum import row_sum_model
from kmodels.testing.row_sum import row_sum_table
from kmodels.testing.row_sum import sgd_oracle


class _Refused(Exception):
    """The reference refuses a batch; nothing changes."""


class _Reference:
    """The documented rules of a `KeyIndex` with a time-to-live.

    A held key is a dict `{key, row, serial, tick, count, stamp}`: its
    admission order, the growing lookup it was last seen in, its
    appearances since admitted, and its stamp (that lookup's tick, or the
    clock's reading then). At the start of a growing lookup with stamp
    `now` (the lookup's tick, or the clock's reading, never below an
    earlier one) every key with `now - stamp > ttl` leaves and frees its
    row (queued for reset); waiting keys with `now - stamp > ttl` lose
    their counts. Then the batch: new keys (first appearance order) take
    the free rows lowest first, then unused rows, then evicted keys' rows
    (LRU: smallest `(tick, serial)`; LFU: `(count, tick, serial)`; never
    a key of the batch).
    """

    def __init__(
        self,
        first_row,
        oov_row,
        max_capacity,
        eviction,
        min_count,
        ttl,
        clock=None,
    ):
        self.first_row, self.oov_row = first_row, oov_row
        self.max_capacity, self.eviction = max_capacity, eviction
        self.min_count, self.ttl, self.clock = min_count, ttl, clock
        self.entries = []
        self.free = []  # rows expired keys freed
        self.high = first_row  # first never-used row
        self.waiting = []  # [key, count, stamp], least recently seen first
        self.resets = set()
        self.reading = None
        self.tick = self.serial = self.evictions = self.expirations = 0
        self.forgotten = 0

    def entry(self, key):
        for entry in self.entries:
            if entry["key"] == key:
                return entry
        return None

    def keys(self):
        return [e["key"] for e in sorted(self.entries, key=lambda e: e["row"])]

    def rows(self):
        return sorted(e["row"] for e in self.entries)

    def read(self, keys):
        entries = [self.entry(key) for key in keys]
        return [self.oov_row if e is None else e["row"] for e in entries]

    def _now(self):
        if self.clock is None:
            return self.tick + 1
        now = float(self.clock.value)
        if self.reading is not None and now < self.reading:
            now = self.reading
        return now

    def grow(self, keys):
        """Rows of `keys`; a refused batch changes nothing."""
        saved = copy.deepcopy(
            {k: v for k, v in vars(self).items() if k != "clock"}
        )
        try:
            return self._apply(keys)
        except _Refused:
            vars(self).update(saved)
            raise

    def expire(self):
        """What `KeyIndex.expire()` does: the expiry of the next lookup."""
        before = self.expirations
        self._expire(self._now())
        return self.expirations - before

    def _expire(self, now):
        for entry in list(self.entries):
            if now - entry["stamp"] > self.ttl:
                self.entries.remove(entry)
                self.free.append(entry["row"])
                self.resets.add(entry["row"])
                self.expirations += 1
        self.waiting = [w for w in self.waiting if not now - w[2] > self.ttl]
        if self.clock is not None:
            self.reading = now

    def _apply(self, keys):
        now = self._now()
        self._expire(now)
        distinct = []
        for key in keys:
            if key not in distinct:
                distinct.append(key)
        occurrences = {key: keys.count(key) for key in distinct}
        counts = {w[0]: w[1] for w in self.waiting}
        new, still_waiting = [], []
        for key in distinct:
            if self.entry(key) is None:
                if counts.get(key, 0) + occurrences[key] >= self.min_count:
                    new.append(key)
                else:
                    still_waiting.append(key)
        reused = sorted(self.free)[: len(new)]
        unused = len(new) - len(reused)
        if self.max_capacity is not None:
            unused = min(unused, self.max_capacity - self.high)
        evict = len(new) - len(reused) - unused
        others = [e for e in self.entries if e["key"] not in distinct]
        if evict and self.eviction is None:
            raise _Refused("full")
        if evict > len(others):
            raise _Refused("crowded")
        if self.eviction == "lru":
            others.sort(key=lambda e: (e["tick"], e["serial"]))
        else:
            others.sort(key=lambda e: (e["count"], e["tick"], e["serial"]))
        victims = others[:evict]
        self.tick += 1
        for entry in self.entries:
            if entry["key"] in distinct:
                entry["count"] += occurrences[entry["key"]]
                entry["tick"], entry["stamp"] = self.tick, now
        taken = reused + list(range(self.high, self.high + unused))
        taken += [e["row"] for e in victims]
        self.high += unused
        self.free = [r for r in self.free if r not in reused]
        self.entries = [e for e in self.entries if e not in victims]
        self.resets.update(e["row"] for e in victims)
        self.evictions += evict
        for key, row in zip(new, taken):
            self.entries.append(
                dict(
                    key=key,
                    row=row,
                    serial=self.serial,
                    tick=self.tick,
                    count=occurrences[key],
                    stamp=now,
                )
            )
            self.serial += 1
        self.waiting = [w for w in self.waiting if w[0] not in distinct]
        for key in still_waiting:
            self.waiting.append(
                [key, counts.get(key, 0) + occurrences[key], now]
            )
        # Waiting keys past the limit: the least recently seen forgotten.
        floor = admission._CANDIDATES_FLOOR
        limit = max(floor, self.max_capacity or len(self.entries))
        while len(self.waiting) > limit:
            self.waiting.pop(0)
            self.forgotten += 1
        return self.read(keys)

    def take_reset_rows(self):
        rows = sorted(self.resets)
        self.resets = set()
        return rows


class _Clock:
    """An injected clock: `value` seconds, set by the test."""

    def __init__(self):
        self.value = 0.0
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.value


def _copy(index, clock=None):
    """A saved and loaded copy (config and weight store)."""
    store = {}
    index.save_own_variables(store)
    clone = KeyIndex.from_config(index.get_config())
    if clock is not None:
        clone.clock = clock
    clone.load_own_variables(store)
    return clone


def _state(index):
    return (
        index.keys(),
        index.rows().tolist(),
        index.num_rows,
        index.evictions,
        index.expirations,
        dict(index._candidates),
        set(index._resets),
    )


CONFIGS = [
    # (ttl, ttl_seconds, max_capacity, eviction, min_count)
    (3, None, None, None, 1),
    (2, None, 9, "lru", 1),
    (4, None, 9, "lfu", 2),
    (2, None, 10, None, 1),
    (None, 2.5, None, None, 2),
    (None, 1.5, 9, "lru", 1),
]


@pytest.mark.parametrize("key_dtype", ["int64", "string"])
@pytest.mark.parametrize(
    "ttl, ttl_seconds, max_capacity, eviction, min_count", CONFIGS
)
def test_ttl_matches_the_reference(
    monkeypatch, key_dtype, ttl, ttl_seconds, max_capacity, eviction, min_count
):
    # Few waiting keys are kept, so that forgetting them is exercised too.
    monkeypatch.setattr(admission, "_CANDIDATES_FLOOR", 4)
    first_row, oov_row = 2, 1
    clock = _Clock() if ttl_seconds is not None else None
    index = KeyIndex(
        key_dtype,
        first_row=first_row,
        oov_row=oov_row,
        max_capacity=max_capacity,
        eviction=eviction,
        min_count=min_count,
        ttl=ttl,
        ttl_seconds=ttl_seconds,
        clock=clock,
        name="ids",
    )
    reference = _Reference(
        first_row,
        oov_row,
        max_capacity,
        eviction,
        min_count,
        ttl or ttl_seconds,
        clock,
    )
    seed = [len(key_dtype), ttl or 0, max_capacity or 0, min_count]
    rng = np.random.default_rng(seed)
    if key_dtype == "string":
        pool = [f"k-{i}-é" for i in range(30)]
    else:
        pool = [10**12 + 7919 * i for i in range(30)]
    # Skewed: a few keys come back often, most rarely (and expire).
    weights = 1.0 / np.arange(1, len(pool) + 1)
    weights /= weights.sum()
    refusals = expired_early = 0
    for step in range(150):
        if clock is not None:
            # Mostly forward, sometimes back (a wall clock's step).
            clock.value += float(rng.choice([0.0, 0.5, 1.0, 2.0, -1.5]))
        size = int(rng.integers(0, 7))
        flat = [pool[i] for i in rng.choice(len(pool), size, p=weights)]
        if step % 10 == 9:
            # Read-only lookups change nothing and read no clock.
            before, reads = _state(index), clock and clock.reads
            rows = index.lookup(flat, grow=False)
            assert rows.tolist() == reference.read(flat)
            assert _state(index) == before
            assert (clock and clock.reads) == reads
            continue
        if step % 40 == 39:
            # Mid-stream, a saved and loaded copy carries on exactly.
            index = _copy(index, clock)
        if step % 7 == 6:
            # Expiring ahead of the lookup changes nothing it gives.
            early = reference.expire()
            assert index.expire() == early
            expired_early += early
        try:
            expected = reference.grow(flat)
        except _Refused:
            refusals += 1
            before = _state(index)
            with pytest.raises(ValueError, match="is full"):
                index.lookup(flat)
            assert _state(index) == before
            continue
        rows = index.lookup(np.array(flat, dtype=object))
        assert rows.tolist() == expected, step
        assert index.keys() == reference.keys()
        assert index.rows().tolist() == reference.rows()
        assert index.num_rows == reference.high
        assert index.expirations == reference.expirations
        assert index.evictions == reference.evictions
        assert list(index._candidates.items()) == [
            (k, c) for k, c, _ in reference.waiting
        ]
        if step % 3 == 0:
            taken = index.take_reset_rows()
            assert taken.tolist() == reference.take_reset_rows()
    # Every path ran: expiries, rows reused, and per configuration
    # evictions, refusals, waiting keys.
    assert reference.expirations > 15 and expired_early > 0
    assert reference.high - first_row < len(pool)
    if eviction is not None:
        assert reference.evictions > 0
    if max_capacity is not None and eviction is None:
        assert refusals > 0
    if min_count > 1 and max_capacity is None:
        assert reference.forgotten > 0


def test_ttl_counts_growing_lookups():
    index = KeyIndex(ttl=2)
    np.testing.assert_array_equal(index.lookup([10, 20, 30]), [1, 2, 3])
    index.lookup([10])
    index.lookup([10, 30])
    assert index.keys() == [10, 20, 30]  # 20 missed 2 lookups: not yet
    np.testing.assert_array_equal(index.take_reset_rows(), [])
    # The next growing lookup expires 20 first; 40 takes its row.
    np.testing.assert_array_equal(index.lookup([40]), [2])
    assert index.keys() == [10, 40, 30] and index.expirations == 1
    np.testing.assert_array_equal(index.take_reset_rows(), [2])
    # Lookups that do not grow are no steps.
    for _ in range(5):
        index.lookup([10], grow=False)
    assert index.keys() == [10, 40, 30]
    # 10 and 30 missed 2 lookups: they expire, 40 stays; the rows they
    # freed stay free (holes) until new keys take them, lowest first.
    index.lookup([40])
    index.lookup([40])
    index.lookup([40])
    assert index.keys() == [40] and index.rows().tolist() == [2]
    assert index.num_rows == 4 and index.expirations == 3
    np.testing.assert_array_equal(index.take_reset_rows(), [1, 3])
    # An expired key that comes back is new: it takes the lowest free row.
    np.testing.assert_array_equal(index.lookup([30, 50, 60]), [1, 3, 4])
    np.testing.assert_array_equal(index.take_reset_rows(), [])
    # The serving table holds the current rows, holes left out.
    index.lookup([50, 60])
    index.lookup([50, 60])
    index.lookup([50, 60])
    assert index.keys() == [50, 60] and index.rows().tolist() == [3, 4]
    layer = index.lookup_layer()
    rows = np.asarray(layer(np.array([40, 50, 60, 30], np.int64)))
    np.testing.assert_array_equal(rows, [0, 3, 4, 0])


def test_ttl_seconds_reads_the_injected_clock():
    clock = _Clock()
    index = KeyIndex("string", ttl_seconds=10.0, clock=clock)
    assert index.clock is clock
    index.lookup(["a", "b"])
    clock.value = 10.0
    index.lookup(["b"])  # a is 10 s old: not more than ttl_seconds
    assert index.keys() == ["a", "b"]
    clock.value = 10.5
    np.testing.assert_array_equal(index.lookup(["c"]), [1])  # a expired
    assert index.keys() == ["c", "b"] and index.expirations == 1
    # A clock stepping back counts as its largest reading: b (seen at 10)
    # expires once the clock passes 20, not before.
    clock.value = 3.0
    index.lookup(["c"])
    assert index.keys() == ["c", "b"]
    clock.value = 20.5
    index.lookup(["c"])
    assert index.keys() == ["c"]
    # Read once per growing lookup, never by serving lookups.
    reads = clock.reads
    index.lookup(["c", "d"], grow=False)
    index.lookup(["c", "c", "e"])
    assert clock.reads == reads + 1
    # The default clock is the wall clock.
    assert KeyIndex(ttl_seconds=5).clock is time.time
    assert KeyIndex(ttl=5).clock is None and KeyIndex().expirations == 0
    # `expire()` expires what the next growing lookup would, now.
    clock.value = 40.0
    assert index.expire() == 2 and index.keys() == []
    assert KeyIndex().expire() == 0


def test_ttl_min_count_waiting_keys_lose_their_counts():
    index = KeyIndex(ttl=2, min_count=3)
    np.testing.assert_array_equal(index.lookup([7, 7]), [0, 0])
    index.lookup([8])
    index.lookup([8])
    # 7 waited 2 lookups without appearing: its count (2) is gone, so one
    # more appearance does not admit it.
    np.testing.assert_array_equal(index.lookup([7]), [0])
    assert dict(index._candidates) == {8: 2, 7: 1}
    np.testing.assert_array_equal(index.lookup([7, 7, 8]), [1, 1, 2])
    assert index.keys() == [7, 8]


class _FIFO(EvictionPolicy):
    """A policy without `forget`: refused with a time-to-live."""

    def clear(self):
        pass

    def admit(self, rows, counts):
        pass

    def use(self, rows, previous, counts, evict):
        return []


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            dict(ttl=0),
            ValueError,
            "KeyIndex: `ttl` must be an integer >= 1; got 0 (int).",
        ),
        (
            dict(ttl=1.5),
            ValueError,
            "KeyIndex: `ttl` must be an integer >= 1; got 1.5 (float).",
        ),
        (
            dict(ttl=True),
            ValueError,
            "KeyIndex: `ttl` must be an integer >= 1; got True (bool).",
        ),
        (
            dict(ttl_seconds=0),
            ValueError,
            "KeyIndex: `ttl_seconds` must be a finite number > 0.0; got 0 "
            "(int).",
        ),
        (
            dict(ttl_seconds=math.inf),
            ValueError,
            "KeyIndex: `ttl_seconds` must be a finite number > 0.0; got inf "
            "(float).",
        ),
        (
            dict(ttl_seconds="60"),
            ValueError,
            "KeyIndex: `ttl_seconds` must be a finite number > 0.0; got '60' "
            "(str).",
        ),
        (
            dict(ttl=3, ttl_seconds=3.0),
            ValueError,
            "KeyIndex: pass `ttl` (growing lookups) or `ttl_seconds` (seconds "
            "of `clock`), not both; got ttl=3, ttl_seconds=3.0.",
        ),
        (
            dict(ttl=3, clock=time.monotonic),
            ValueError,
            "KeyIndex: `clock` times `ttl_seconds`; got clock=<built-in "
            "function monotonic> with ttl_seconds=None. Pass ttl_seconds, or "
            "no clock.",
        ),
        (
            dict(ttl_seconds=3, clock=5.0),
            TypeError,
            "KeyIndex: `clock` must be a callable returning seconds (like "
            "time.time); got 5.0 (float).",
        ),
        (
            dict(ttl=3, max_capacity=4, eviction=_FIFO()),
            ValueError,
            "KeyIndex: with a time-to-live, the eviction policy forgets the "
            "rows of expired keys, but _FIFO does not implement "
            "`forget(rows, counts)`. Implement it, or pass no ttl.",
        ),
    ],
)
def test_ttl_argument_errors(kwargs, error, message):
    with pytest.raises(error) as caught:
        KeyIndex(**kwargs)
    assert caught.value.args[0] == message


@pytest.mark.parametrize(
    "reading, error, message",
    [
        (
            "5",
            TypeError,
            "`clock()` must return seconds as a real number; got '5' (str).",
        ),
        (
            None,
            TypeError,
            "`clock()` must return seconds as a real number; "
            "got None (NoneType).",
        ),
        (
            math.nan,
            ValueError,
            "`clock()` must return a finite number of seconds; got nan.",
        ),
    ],
)
def test_ttl_bad_clock_readings_change_nothing(reading, error, message):
    clock = _Clock()
    index = KeyIndex(ttl_seconds=1.0, clock=clock, name="ids")
    index.lookup([1, 2])
    before = _state(index)
    clock.value = reading
    with pytest.raises(error) as caught:
        index.lookup([3])
    assert caught.value.args[0] == f"KeyIndex 'ids': {message}"
    assert _state(index) == before


def test_ttl_config_round_trip_and_custom_clock():
    index = KeyIndex(ttl=4, max_capacity=6, eviction="lfu", name="a")
    config = index.get_config()
    assert (config["ttl"], config["ttl_seconds"], config["clock"]) == (
        4,
        None,
        None,
    )
    assert KeyIndex.from_config(config).get_config() == config
    timed = KeyIndex(ttl_seconds=2.0, name="b")
    assert timed.get_config()["clock"] is None
    assert KeyIndex.from_config(timed.get_config()).clock is time.time
    # A custom clock is no config value: the loaded index asks for it
    # rather than reading another clock.
    clock = _Clock()
    custom = KeyIndex(ttl_seconds=2.0, clock=clock, name="c")
    config = custom.get_config()
    assert config["clock"] == "custom"
    loaded = KeyIndex.from_config(config)
    assert loaded.get_config() == config
    with pytest.raises(ValueError) as caught:
        loaded.lookup([1])
    assert caught.value.args[0] == (
        "KeyIndex 'c' was saved with a custom `clock`, which a config "
        "cannot hold. Set it again before the next growing lookup: "
        "`index.clock = my_clock`."
    )
    assert loaded.keys() == []
    loaded.clock = clock
    np.testing.assert_array_equal(loaded.lookup([1]), [1])
    with pytest.raises(TypeError, match="got 3 \\(int\\)"):
        loaded.clock = 3
    with pytest.raises(ValueError, match="this index has ttl_seconds=None"):
        index.clock = clock


def test_ttl_saved_state_is_checked():
    clock = _Clock()
    index = KeyIndex(ttl_seconds=1.0, clock=clock, min_count=2, name="ids")
    index.lookup([1, 1, 2, 2, 3, 3, 4])
    clock.value = 0.5
    index.lookup([3])
    clock.value = 1.2
    index.lookup([3, 5])  # 1 and 2 expire, 4 loses its count, 5 waits
    assert index.rows().tolist() == [3] and index.num_rows == 4
    assert dict(index._candidates) == {5: 1}
    store = {}
    index.save_own_variables(store)
    clone = _copy(index, clock)
    assert _state(clone) == _state(index)
    assert store["ttl_free_rows"].tolist() == [1, 2]
    for name, value in [
        ("ttl_free_rows", np.array([2, 1])),
        ("ttl_key_seen", np.array([np.nan])),
        ("ttl_reading", np.array([1.0, 2.0])),
    ]:
        damaged = dict(store, **{name: value})
        fresh = KeyIndex.from_config(index.get_config())
        fresh.clock = clock
        # The checksum names the damaged entry before anything changes.
        with pytest.raises(ValueError, match=f"saved entry '{name}'"):
            fresh.load_own_variables(damaged)
        assert fresh.keys() == [] and fresh.num_rows == 1
    # Consistent checksums, inconsistent state: named too.
    names = key_index_state._entry_names(index)
    for name, value, message in [
        ("ttl_free_rows", np.array([2, 1]), "increasing rows in [1, 4)"),
        ("ttl_candidate_seen", np.array([9.0]), "none past 1.2"),
    ]:
        damaged = dict(store, **{name: value})
        damaged["checksum"] = entry_checksums(damaged, names)
        fresh = KeyIndex.from_config(index.get_config())
        with pytest.raises(ValueError, match=re.escape(message)):
            fresh.load_own_variables(damaged)
        assert fresh.keys() == [] and fresh.num_rows == 1


def _expiry_model(index):
    table = row_sum_table(index, 3, INIT, 5, 0.5, capacity=4)
    return row_sum_model(table)


INIT = keras.initializers.RandomUniform(-1.0, 1.0)


def test_ttl_fit_restarts_expired_rows_and_survives_keras_file(tmp_path):
    """Inside `fit`, rows of expired keys are restarted before a new key
    trains on them: the table equals NumPy SGD restarting exactly the rows
    the reference expired; a `.keras` round trip mid-stream carries on
    identically."""
    keras.utils.set_random_seed(0)
    index = KeyIndex(ttl=4)
    model, table = _expiry_model(index)
    rng = np.random.default_rng(3)
    hot = [10**12 + i for i in range(3)]
    # Session keys: each lives for 2 batches, then never comes back.
    batches = []
    for step in range(24):
        keys = hot + [5 * 10**12 + step // 2, 5 * 10**12 + 100 + step // 3]
        batches.append(
            (keys, rng.uniform(-1, 1, (len(keys), 1)).astype("float32"))
        )
    reference = _Reference(1, 0, None, None, 1, 4)
    fed = []

    def run(model, index, part):
        def generator():
            for keys, target in part:
                rows = index.lookup(keys)
                fed.append(rows)
                yield rows.reshape(-1, 1).astype("int32"), target

        growth = EmbeddingGrowth()
        model.fit(
            generator(),
            steps_per_epoch=len(part),
            shuffle=False,
            verbose=0,
            callbacks=[growth],
        )
        return growth

    first = run(model, index, batches[:12])
    path = str(tmp_path / "ttl.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    copy_table = loaded.get_layer("users")
    assert copy_table.key_index is not index
    assert copy_table.key_index.keys() == index.keys()
    assert copy_table.key_index.expirations == index.expirations
    second = run(loaded, copy_table.key_index, batches[12:])
    # The index expired what the reference expires, batch by batch.
    expired = {}
    for step, (keys, _) in enumerate(batches):
        assert reference.grow(keys) == fed[step].tolist(), step
        expired[step] = reference.take_reset_rows()
    assert reference.expirations == 15  # 9 + 6 session keys
    # 3 hot keys and at most 6 live session keys: 9 rows (23 without
    # ttl), the table never grew past them.
    assert reference.high == 1 + 9 and copy_table.capacity == 16
    logged = {}
    for growth, offset in ((first, 0), (second, 12)):
        for entry in growth.reset_log:
            logged.setdefault(entry["step"] + offset, []).append(entry["rows"])
    restarted = sorted(
        np.concatenate([r for rs in logged.values() for r in rs]).tolist()
    )
    assert restarted == sorted(r for rows in expired.values() for r in rows)
    # Each expired row was restarted after its old key's last step and no
    # later than the step of the batch whose lookup expired it.
    last = {}
    for step, rows in enumerate(fed):
        for row in expired[step]:
            assert any(
                last[row] < s <= step and any(row in r for r in rs)
                for s, rs in logged.items()
            ), (row, step)
        for row in rows.tolist():
            last[row] = step
    targets = [t for _, t in batches]
    initial = initial_rows(copy_table.capacity, 3, INIT, 5, reserved=1)
    expected = sgd_oracle(initial, fed, targets, logged, 0.5)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(copy_table.embeddings.value),
        expected,
        atol=1e-5,
        rtol=0,
    )


def test_ttl_lookups_from_threads_keep_a_whole_state():
    """4 threads share an LRU-bounded index with a time-to-live: every
    lookup gives one row per key, and the index ends whole (rows of live
    keys and free rows partition the rows used; every key admitted is
    live, expired or evicted), and saves and loads as it is."""
    index = KeyIndex(max_capacity=40, eviction="lru", ttl=6)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, 121)
        for _ in range(150):
            keys = rng.choice(120, 8, p=weights / weights.sum())
            rows = index.lookup(keys)
            by_key = dict(zip(keys.tolist(), rows.tolist()))
            if any(by_key[k] != r for k, r in zip(keys.tolist(), rows)):
                errors.append(keys)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows, free = index.rows().tolist(), index._expiry.free
    assert sorted(rows + free) == list(range(1, index.num_rows))
    assert index.num_rows <= 40 and index.expirations > 50
    admitted = index._counters[1]
    assert admitted == len(index) + index.expirations + index.evictions
    clone = _copy(index)
    assert _state(clone) == _state(index)
    keys = np.arange(0, 120, 12)
    np.testing.assert_array_equal(clone.lookup(keys), index.lookup(keys))
