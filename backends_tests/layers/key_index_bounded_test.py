"""Bounded KeyIndex: `max_capacity`, LRU/LFU eviction, `min_count`
admission, the reset-row queue, and their saved state.

`_Reference` below is an independent simulator of the documented rules,
written for clarity (lists, a full sort per eviction): `KeyIndex` must
give its rows, keys, evictions and reset rows exactly, batch after batch.
"""

import keras
import numpy as np
import pytest

from kmodels.growable import admission as key_index_module
from kmodels.layers import EvictionPolicy
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.layers import LFUEviction
from kmodels.layers import LRUEviction


class _Refused(Exception):
    """The reference refuses a batch: `args[0]` is `"full"` (no eviction)
    or `"crowded"` (more new keys than rows to evict)."""


class _Reference:
    """The rules of a bounded `KeyIndex`, one key at a time.

    An admitted key is a dict `{key, row, serial, tick, count}`: its row,
    its admission order, the growing lookup it was last seen in and its
    appearances since admitted. LRU evicts the smallest `(tick, serial)`,
    LFU the smallest `(count, tick, serial)`, never a key of the batch.
    New keys (first appearance order) take unused rows, then the evicted
    keys' rows in eviction order.
    """

    def __init__(self, first_row, oov_row, max_capacity, eviction, min_count):
        self.first_row, self.oov_row = first_row, oov_row
        self.max_capacity, self.eviction = max_capacity, eviction
        self.min_count = min_count
        self.entries = []  # admitted keys, any order
        self.waiting = []  # [key, count], least recently seen first
        self.resets = set()
        self.tick = self.serial = self.evictions = self.forgotten = 0

    def entry(self, key):
        for entry in self.entries:
            if entry["key"] == key:
                return entry
        return None

    def keys(self):
        return [e["key"] for e in sorted(self.entries, key=lambda e: e["row"])]

    def read(self, keys):
        rows = []
        for key in keys:
            entry = self.entry(key)
            rows.append(self.oov_row if entry is None else entry["row"])
        return rows

    def limit(self, floor):
        if self.max_capacity is None:
            return max(floor, len(self.entries))
        return max(floor, self.max_capacity)

    def grow(self, keys, floor):
        distinct = []
        for key in keys:
            if key not in distinct:
                distinct.append(key)
        occurrences = {key: keys.count(key) for key in distinct}
        waiting = dict((k, c) for k, c in self.waiting)
        new, still_waiting = [], []
        for key in distinct:
            if self.entry(key) is None:
                total = waiting.get(key, 0) + occurrences[key]
                if total >= self.min_count:
                    new.append(key)
                else:
                    still_waiting.append(key)
        used = self.first_row + len(self.entries)
        unused = len(new)
        if self.max_capacity is not None:
            unused = min(len(new), self.max_capacity - used)
        evict = len(new) - unused
        others = [e for e in self.entries if e["key"] not in distinct]
        if evict and self.eviction is None:
            raise _Refused("full", new[unused])
        if evict > len(others):
            raise _Refused("crowded", len(new), unused, len(others))
        if self.eviction == "lru":
            others.sort(key=lambda e: (e["tick"], e["serial"]))
        else:
            others.sort(key=lambda e: (e["count"], e["tick"], e["serial"]))
        victims = others[:evict]
        self.tick += 1
        for entry in self.entries:
            if entry["key"] in distinct:
                entry["count"] += occurrences[entry["key"]]
                entry["tick"] = self.tick
        free = list(range(used, used + unused)) + [e["row"] for e in victims]
        self.entries = [e for e in self.entries if e not in victims]
        self.resets.update(e["row"] for e in victims)
        self.evictions += evict
        for key, row in zip(new, free):
            self.entries.append(
                dict(
                    key=key,
                    row=row,
                    serial=self.serial,
                    tick=self.tick,
                    count=occurrences[key],
                )
            )
            self.serial += 1
        self.waiting = [[k, c] for k, c in self.waiting if k not in distinct]
        for key in still_waiting:
            self.waiting.append([key, waiting.get(key, 0) + occurrences[key]])
        while len(self.waiting) > self.limit(floor):
            self.waiting.pop(0)
            self.forgotten += 1
        return self.read(keys)

    def take_reset_rows(self):
        rows = sorted(self.resets)
        self.resets = set()
        return rows


def _messages(name, refused, max_capacity):
    tail = "No key of this batch was added."
    if refused.args[0] == "full":
        return (
            f"KeyIndex '{name}' is full: max_capacity={max_capacity} rows "
            f"are in use and eviction=None, so the new key "
            f"{refused.args[1]!r} gets no row. {tail} Pass eviction='lru' "
            "or 'lfu' to reuse rows, or a larger max_capacity."
        )
    _, new, unused, others = refused.args
    return (
        f"KeyIndex '{name}' is full (max_capacity={max_capacity}) and this "
        f"batch has {new} new keys to admit, but only {max(unused, 0)} "
        f"unused rows and {others} rows of keys absent from the batch (a "
        f"key of the batch is never evicted). {tail} Use smaller batches "
        "or a larger max_capacity."
    )


def _state(index):
    return (
        index.keys(),
        index.num_rows,
        index.evictions,
        dict(index._candidates),
        set(index._resets),
    )


def _copy(index):
    store = {}
    index.save_own_variables(store)
    clone = KeyIndex.from_config(index.get_config())
    clone.load_own_variables(store)
    return clone


def _pool(key_dtype, size):
    if key_dtype == "string":
        return [f"k-{i}-é" for i in range(size)]
    return [10**12 + 7919 * i for i in range(size)]


CONFIGS = [
    # (max_capacity, eviction, min_count)
    (9, "lru", 1),
    (9, "lfu", 1),
    (9, "lru", 3),
    (9, "lfu", 2),
    (12, None, 1),
    (12, None, 2),
    (None, None, 3),
]


@pytest.mark.parametrize("key_dtype", ["int64", "string"])
@pytest.mark.parametrize("max_capacity, eviction, min_count", CONFIGS)
def test_matches_the_reference(
    monkeypatch, key_dtype, max_capacity, eviction, min_count
):
    # Few waiting keys are kept, so that forgetting them is exercised too.
    floor = 6
    monkeypatch.setattr(key_index_module, "_CANDIDATES_FLOOR", floor)
    first_row, oov_row = 2, 1
    index = KeyIndex(
        key_dtype,
        first_row=first_row,
        oov_row=oov_row,
        max_capacity=max_capacity,
        eviction=eviction,
        min_count=min_count,
        name="ids",
    )
    reference = _Reference(
        first_row, oov_row, max_capacity, eviction, min_count
    )
    seed = [len(key_dtype), max_capacity or 0, len(eviction or ""), min_count]
    rng = np.random.default_rng(seed)
    pool = _pool(key_dtype, 40)
    # Skewed: a few keys come back often, most rarely.
    weights = 1.0 / np.arange(1, len(pool) + 1)
    weights /= weights.sum()
    refusals = 0
    for step in range(120):
        size = int(rng.integers(0, 9))
        flat = [pool[i] for i in rng.choice(len(pool), size, p=weights)]
        if step % 10 == 9:
            # Read-only lookups change nothing, counts and recency included.
            before = _state(index)
            rows = index.lookup(flat, grow=False)
            assert rows.tolist() == reference.read(flat)
            assert _state(index) == before
            continue
        if step % 25 == 24:
            # A saved and loaded copy carries on exactly.
            index = _copy(index)
        try:
            expected = reference.grow(flat, floor)
        except _Refused as refused:
            refusals += 1
            before = _state(index)
            with pytest.raises(ValueError) as caught:
                index.lookup(flat)
            assert caught.value.args[0] == _messages(
                "ids", refused, max_capacity
            )
            assert _state(index) == before
            continue
        rows = index.lookup(np.array(flat, dtype=object))
        assert rows.dtype == np.int64
        assert rows.tolist() == expected, step
        assert index.keys() == reference.keys()
        assert index.num_rows == first_row + len(reference.entries)
        assert index.evictions == reference.evictions
        assert list(index._candidates.items()) == [
            tuple(w) for w in reference.waiting
        ]
        if max_capacity is not None:
            assert index.num_rows <= max_capacity
        if step % 3 == 0:
            taken = index.take_reset_rows()
            assert taken.dtype == np.int64
            assert taken.tolist() == reference.take_reset_rows()
    # Every path ran: evictions, refusals, forgotten waiting keys.
    if eviction is not None:
        assert reference.evictions > 10
    if max_capacity is not None and min_count == 1:
        assert refusals > 0
    if min_count > 1:
        assert reference.forgotten > 0


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_a_hot_set_keeps_its_rows_in_a_long_stream(eviction):
    # 100,000 distinct keys over 200 batches, at most 1,000 rows; 50 hot
    # keys in every batch are never evicted.
    index = KeyIndex(max_capacity=1000, eviction=eviction)
    hot = np.arange(50, dtype=np.int64) - 10**15
    hot_rows = index.lookup(hot)
    np.testing.assert_array_equal(hot_rows, np.arange(1, 51))
    cold = 10**12 + np.arange(100_000, dtype=np.int64)
    for batch in range(200):
        keys = np.concatenate([cold[batch * 500 : (batch + 1) * 500], hot])
        rows = index.lookup(keys)
        np.testing.assert_array_equal(rows[-50:], hot_rows)
        assert index.num_rows <= 1000
        assert len(set(rows[:-50].tolist())) == 500
    assert index.num_rows == 1000 and len(index) == 999
    # 50 + 100,000 keys admitted, 999 held.
    assert index.evictions == 100_050 - 999
    index.take_reset_rows()
    # An evicted key comes back: a new key, on a row to reset.
    assert int(cold[0]) not in set(index.keys())
    (row,) = index.lookup(cold[:1])
    assert row in index.take_reset_rows().tolist()
    assert index.keys()[row - 1] == int(cold[0])
    np.testing.assert_array_equal(index.lookup(hot), hot_rows)


def test_lru_and_lfu_choose_their_victims():
    lru = KeyIndex(max_capacity=4, eviction="lru")
    lfu = KeyIndex(max_capacity=4, eviction="lfu")
    for index in (lru, lfu):
        index.lookup([1, 1, 1, 2, 3])  # rows 1, 2, 3
        index.lookup([2, 3])
    # LRU: key 1, last seen first. LFU: 2 and 3 were seen twice, 1 three
    # times: 2 (admitted first) goes.
    assert lru.lookup([4]).tolist() == [1]
    assert lfu.lookup([4]).tolist() == [2]
    assert lru.keys() == [4, 2, 3] and lfu.keys() == [1, 4, 3]
    assert lru.take_reset_rows().tolist() == [1]
    assert lfu.take_reset_rows().tolist() == [2]
    assert lru.take_reset_rows().tolist() == []  # cleared
    # Key 1 comes back to the LRU index: a new key again.
    assert lru.lookup([1]).tolist() == [2]
    assert lru.evictions == 2 and lru.capacity_left == 0


def test_min_count_admission():
    index = KeyIndex("string", min_count=3)
    # Every occurrence counts, across lookups; until admitted: oov_row 0.
    assert index.lookup(["a", "b", "a"]).tolist() == [0, 0, 0]
    assert index.lookup(["b", "c"]).tolist() == [0, 0]
    # Read-only lookups do not count.
    assert index.lookup(["b", "b"], grow=False).tolist() == [0, 0]
    # "a" reaches 3 here: every occurrence of this batch reads its row.
    assert index.lookup(["a", "b", "a"]).tolist() == [1, 2, 1]
    assert index.keys() == ["a", "b"] and len(index) == 2
    assert dict(index._candidates) == {"c": 1}
    index.freeze()
    assert index.lookup(["c", "a"]).tolist() == [0, 1]


def test_capacity_without_eviction_refuses_whole_batches():
    for size in (5, 20_000):  # per key, and deduplicated with NumPy
        index = KeyIndex(max_capacity=6, first_row=1, name="ids")
        index.lookup([10, 11, 12])
        keys = [13, 10, 14, 13, 15] + [10] * (size - 5)
        with pytest.raises(ValueError) as caught:
            index.lookup(np.array(keys))
        assert caught.value.args[0] == (
            "KeyIndex 'ids' is full: max_capacity=6 rows are in use and "
            "eviction=None, so the new key 15 gets no row. No key of this "
            "batch was added. Pass eviction='lru' or 'lfu' to reuse rows, or "
            "a larger max_capacity."
        )
        assert index.keys() == [10, 11, 12]
        index.lookup([13, 14])
        assert index.num_rows == 6 and index.capacity_left == 0
        assert index.lookup([14, 10]).tolist() == [5, 1]


def test_a_batch_with_more_new_keys_than_evictable_rows_is_refused():
    index = KeyIndex("string", max_capacity=4, eviction="lfu", name="ids")
    index.lookup(["a", "b", "c"])
    before = _state(index)
    with pytest.raises(ValueError) as caught:
        index.lookup(["a", "x", "y", "z"])
    assert caught.value.args[0] == (
        "KeyIndex 'ids' is full (max_capacity=4) and this batch has 3 new "
        "keys to admit, but only 0 unused rows and 2 rows of keys absent "
        "from the batch (a key of the batch is never evicted). No key of "
        "this batch was added. Use smaller batches or a larger "
        "max_capacity."
    )
    assert _state(index) == before
    assert index.lookup(["x", "y", "a"]).tolist() == [2, 3, 1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"eviction": "lru"},
            "KeyIndex: `eviction='lru'` evicts keys once the index holds "
            "`max_capacity` rows; got max_capacity=None. Pass max_capacity, "
            "or eviction=None.",
        ),
        (
            {"max_capacity": 5, "eviction": "fifo"},
            "KeyIndex: `eviction` must be one of ('lru', 'lfu'); got 'fifo' "
            "(str).",
        ),
        (
            {"max_capacity": 2, "first_row": 2, "oov_row": 1},
            "KeyIndex: `max_capacity` counts the reserved rows too, so it "
            "must be > first_row=2 to leave a row for a key; got "
            "max_capacity=2.",
        ),
        (
            {"max_capacity": 0},
            "KeyIndex: `max_capacity` must be an integer >= 1; got 0 (int).",
        ),
        (
            {"min_count": 0},
            "KeyIndex: `min_count` must be an integer >= 1; got 0 (int).",
        ),
        (
            {"min_count": 2, "oov_row": None},
            "KeyIndex: `min_count=2` needs an `oov_row`: keys seen fewer "
            "than min_count times read it; got oov_row=None.",
        ),
    ],
)
def test_constructor_errors(kwargs, message):
    with pytest.raises(ValueError) as caught:
        KeyIndex(**kwargs)
    assert caught.value.args[0] == message


def test_config_and_saved_state_round_trip():
    index = KeyIndex(
        "string", max_capacity=5, eviction="lfu", min_count=2, name="skus"
    )
    config = index.get_config()
    assert (config["max_capacity"], config["eviction"]) == (5, "lfu")
    assert config["min_count"] == 2
    for batch in (["a", "a", "b"], ["c", "c", "d", "d", "e", "e"], ["f"]):
        index.lookup(batch)
    index.lookup(["g", "g", "b"])
    store = {}
    index.save_own_variables(store)
    clone = KeyIndex.from_config(config)
    clone.load_own_variables(store)
    assert _state(clone) == _state(index)
    # A damaged entry is named and nothing is loaded.
    store["key_counts"] = store["key_counts"] + 1
    fresh = KeyIndex.from_config(config)
    with pytest.raises(ValueError, match="saved entry 'key_counts' does not"):
        fresh.load_own_variables(store)
    assert fresh.keys() == []
    # More keys than a smaller max_capacity holds.
    small = KeyIndex.from_config(dict(config, max_capacity=3, name="small"))
    store["key_counts"] = store["key_counts"] - 1
    with pytest.raises(ValueError) as caught:
        small.load_own_variables(store)
    assert caught.value.args[0] == (
        "KeyIndex 'small': the saved state holds 4 keys, which need 5 rows, "
        "but max_capacity=3. Was it saved by an index with a larger "
        "max_capacity?"
    )


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_keras_file_round_trip_evicts_like_the_original(tmp_path, eviction):
    index = KeyIndex(max_capacity=8, eviction=eviction, min_count=2)
    table = GrowableEmbedding(2, initial_capacity=8, seed=3, key_index=index)
    ids = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(ids, keras.ops.sum(table(ids), axis=-1))
    rng = np.random.default_rng(4)
    for _ in range(30):
        index.lookup(rng.integers(0, 25, 6))
    assert index.evictions > 0
    path = str(tmp_path / "bounded.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    copy = next(
        layer.key_index
        for layer in loaded.layers
        if isinstance(layer, GrowableEmbedding)
    )
    assert copy is not index and copy.eviction == eviction
    assert _state(copy) == _state(index)
    for _ in range(30):
        keys = rng.integers(0, 25, 6)
        np.testing.assert_array_equal(copy.lookup(keys), index.lookup(keys))
        np.testing.assert_array_equal(
            copy.take_reset_rows(), index.take_reset_rows()
        )
    assert copy.keys() == index.keys() and copy.evictions == index.evictions


def test_lookup_layer_exports_the_current_rows():
    index = KeyIndex("string", max_capacity=4, eviction="lru")
    index.lookup(["a", "b", "c"])
    index.lookup(["b", "d", "c"])  # "d" takes the row of "a"
    assert index.keys() == ["d", "b", "c"]
    layer = index.lookup_layer()
    rows = np.asarray(layer(np.array(["a", "b", "c", "d"])))
    np.testing.assert_array_equal(rows, [0, 2, 3, 1])


def test_eviction_by_name_or_policy_instance():
    by_name = KeyIndex(max_capacity=4, eviction="lfu")
    by_instance = KeyIndex(max_capacity=4, eviction=LFUEviction())
    assert type(by_name.eviction) is LFUEviction
    # A built-in policy equals its name, and its config holds the name, as
    # when `eviction` was a string: configs and files load unchanged.
    assert by_name.eviction == "lfu" and by_name.eviction != "lru"
    assert by_instance.get_config()["eviction"] == "lfu"
    assert by_instance.eviction == LFUEviction() != LRUEviction()
    for index in (by_name, by_instance):
        index.lookup([1, 1, 2, 3])
        assert index.lookup([4, 5]).tolist() == [2, 3]
    # Its state is the index's usage record: nothing more to save.
    assert LRUEviction().get_state() == LFUEviction().get_state() == {}
    # A policy records the rows of one index.
    policy = LRUEviction()
    first = KeyIndex(max_capacity=3, eviction=policy, name="first")
    with pytest.raises(ValueError) as caught:
        KeyIndex(max_capacity=3, eviction=policy)
    assert caught.value.args[0] == (
        "KeyIndex: this LRUEviction already serves KeyIndex 'first', and a "
        "policy records the rows of one index. Pass a new instance (or a "
        "name: 'lru', 'lfu')."
    )
    assert first.eviction is policy
    with pytest.raises(ValueError) as caught:
        KeyIndex(max_capacity=3, eviction=3)
    assert caught.value.args[0] == (
        "KeyIndex: `eviction` must be one of ('lru', 'lfu') or an "
        "EvictionPolicy; got 3 (int)."
    )


class _EvictsTheBatch(EvictionPolicy):
    """A broken policy: evicts the batch's own rows."""

    def clear(self):
        pass

    def admit(self, rows, counts):
        pass

    def use(self, rows, previous, counts, evict):
        return rows[:evict]


def test_a_policy_that_evicts_a_key_of_the_batch_is_refused():
    index = KeyIndex(max_capacity=3, eviction=_EvictsTheBatch(), name="ids")
    index.lookup([7, 8])
    before = _state(index)
    with pytest.raises(ValueError) as caught:
        index.lookup([7, 9])
    assert caught.value.args[0] == (
        "KeyIndex 'ids': _EvictsTheBatch.use returned the rows [1]; it must "
        "return 1 distinct held rows (ints in [1, 3)), none of them a row of "
        "this batch. No key of this batch was added."
    )
    assert _state(index) == before
