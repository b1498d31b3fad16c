"""Maps arbitrary keys (int64 ids, strings) to dense rows of a table."""

import collections
import functools
import heapq
import itertools
import threading

import keras
import numpy as np

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.growable.key_table import key_table
from kmodels.growable.saved_state import checked_entries
from kmodels.growable.saved_state import entry_checksums

_KEY_DTYPES = ("int64", "string")
_EVICTIONS = ("lru", "lfu")
# Fewest not-yet-admitted keys whose counts a `min_count` index keeps.
_CANDIDATES_FLOOR = 1024
# Columns of `KeyIndex._usage`.
_SERIAL, _TICK, _COUNT = 0, 1, 2
# Batch sizes from which `KeyIndex.lookup` first reduces a batch to its
# distinct keys; below, one dict lookup per key is faster (measured: string
# keys cost a hash and a set insertion each to deduplicate).
_DEDUPLICATE_FROM = {"int64": 8192, "string": 65536}
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _locked(method):
    """Runs `method` holding the index's lock: lookups, eviction, the reset
    queue and saving see and leave a whole state, also when
    `keras.utils.PyDataset` workers (threads) share the index."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._index_lock:
            return method(self, *args, **kwargs)

    return locked


@keras.saving.register_keras_serializable(package="kmodels")
class KeyIndex(keras.layers.Layer):
    """Maps raw keys (int64 ids like `10**12`, product codes) to dense rows.

    A data-pipeline companion of `GrowableEmbedding`: `lookup(keys)` returns
    NumPy int64 rows, assigning the next free row to each new key (rows
    `first_row, first_row + 1, ...` in order of arrival), so the table it
    feeds grows with the keys. `freeze()` stops that for serving: unknown
    keys then map to `oov_row`, or raise a `KeyError` when `oov_row` is
    `None`. Attach it to a table (`GrowableEmbedding(..., key_index=index)`)
    and it is saved and loaded with the model (`.keras` and weights files).
    It runs on NumPy, outside the compiled model, on every backend.

    `lookup` checks the whole batch before it assigns any row, so a refused
    batch adds no key: int64 keys must be integers in `[-2**63, 2**63)`
    (Python or NumPy ints, or an integer NumPy array; a `uint64` key
    `>= 2**63` is refused), string keys `str` encodable as UTF-8 (a lone
    surrogate such as `"\\ud800"` is refused) or UTF-8 `bytes`. A wrong
    type raises a `TypeError`, a value that could not be saved a
    `ValueError`: every key an index holds can be saved.

    Bounded tables: `max_capacity` caps the rows in use (`num_rows`,
    reserved rows included). Full, an index without `eviction` refuses a
    batch with a new key (`ValueError`). With `eviction="lru"` a new key
    takes the row of the least recently used key (last seen in the
    earliest growing `lookup`; ties: the one admitted first); with
    `"lfu"`, of the least frequently used one (fewest appearances since it
    was admitted, the admitting batch's included; ties: least recently
    used, as for `"lru"`). A key of the current batch is never evicted: a
    batch with more new keys than the unused rows plus the rows of keys
    absent from it is refused. An evicted key is forgotten; if it comes
    back, it is a new key. New keys of a batch, in order of first
    appearance, take the never-used rows first, then the evicted keys'
    rows, least recently (or frequently) used first. `take_reset_rows()`
    lists the rows that changed key, for the table to restart them.

    Admission: with `min_count=n`, a key gets a row in the `lookup` in
    which its appearances (every occurrence, in every growing `lookup`)
    reach `n`, and reads `oov_row` until then. The counts of keys still
    waiting are kept for at most `max(1024, max_capacity)` keys (unbounded
    index: `max(1024, len(index))`), the least recently seen forgotten
    first.

    Threads: `lookup`, `keys()`, eviction, `take_reset_rows()`, `freeze()`
    and saving hold the index's lock, so an index can be shared by the
    threads of a `keras.utils.PyDataset(workers=...)` or a server: each
    call sees and leaves a whole state (one row per key, rows without
    gaps). The key checks run before the lock.

    A growing `lookup` of an index with `eviction` or `min_count > 1` costs
    time in proportion to its batch, not to the index (amortised; `"lfu"`:
    times a logarithm of the number of distinct counts). Lookups that do
    not grow (`grow=False`, or frozen) only read: they change no count,
    recency or row.

    The saved keys carry a CRC32 checksum per entry; loading verifies it
    and the keys' structure (lengths, duplicates, UTF-8) before it
    replaces anything, and raises a `ValueError` naming the layer and the
    entry otherwise (files saved without checksums load unverified, with a
    warning). A bounded index saves its counts, recency, waiting keys and
    reset rows too: a loaded copy evicts exactly as the original would.

    Args:
        key_dtype: `"int64"` or `"string"`.
        first_row: int >= 0. Row of the first key; rows below it are
            reserved (row 0 for padding with `mask_zero=True`, or for
            unknown keys).
        oov_row: int or `None`. Row of unknown keys once frozen, and of
            keys not yet admitted (`min_count`); a reserved row, below
            `first_row` (or 0 when `first_row=0`).
        frozen: bool. Start frozen.
        max_capacity: int > `first_row`, or `None` (unbounded). Most rows
            in use, reserved rows included.
        eviction: `None`, `"lru"` or `"lfu"`. What a full index does with
            a new key: refuse it (`None`) or evict a key for it. Needs
            `max_capacity`.
        min_count: int >= 1. Appearances a key needs to get a row; above
            1 it needs an `oov_row`.
        **kwargs: other `keras.layers.Layer` arguments (`name`).

    Example:

    ```python
    index = kmodels.layers.KeyIndex("string")
    index.lookup(["sku-9", "sku-2", "sku-9"])  # array([1, 2, 1])
    index.freeze()
    index.lookup(["sku-7"])  # array([0]): the reserved unknown row

    # At most 3 rows (row 0 reserved): the least recently used key goes.
    index = kmodels.layers.KeyIndex(max_capacity=3, eviction="lru")
    index.lookup([10, 20])  # array([1, 2])
    index.lookup([10])  # array([1]): 20 is now the least recently used
    index.lookup([30])  # array([2]): 30 takes 20's row
    index.take_reset_rows()  # array([2]): restart row 2 of the table
    index.keys()  # [10, 30]
    ```
    """

    def __init__(
        self,
        key_dtype="int64",
        first_row=1,
        oov_row=0,
        frozen=False,
        max_capacity=None,
        eviction=None,
        min_count=1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        key_dtype = check_choice(
            key_dtype, "key_dtype", "KeyIndex", _KEY_DTYPES
        )
        first_row = check_int(first_row, "first_row", "KeyIndex", minimum=0)
        oov_row = check_optional_int(oov_row, "oov_row", "KeyIndex", minimum=0)
        if oov_row is not None and not oov_row < max(first_row, 1):
            raise ValueError(
                "KeyIndex: `oov_row` must be a reserved row in [0, "
                f"first_row={first_row}); got {oov_row}."
            )
        max_capacity = check_optional_int(
            max_capacity, "max_capacity", "KeyIndex", minimum=1
        )
        if max_capacity is not None and max_capacity <= first_row:
            raise ValueError(
                "KeyIndex: `max_capacity` counts the reserved rows too, so "
                f"it must be > first_row={first_row} to leave a row for a "
                f"key; got max_capacity={max_capacity}."
            )
        if eviction is not None:
            eviction = check_choice(
                eviction, "eviction", "KeyIndex", _EVICTIONS
            )
            if max_capacity is None:
                raise ValueError(
                    f"KeyIndex: `eviction={eviction!r}` evicts keys once "
                    "the index holds `max_capacity` rows; got "
                    "max_capacity=None. Pass max_capacity, or eviction=None."
                )
        min_count = check_int(min_count, "min_count", "KeyIndex", minimum=1)
        if min_count > 1 and oov_row is None:
            raise ValueError(
                f"KeyIndex: `min_count={min_count}` needs an `oov_row`: "
                "keys seen fewer than min_count times read it; got "
                "oov_row=None."
            )
        self.key_dtype = key_dtype
        self.first_row = first_row
        self.oov_row = oov_row
        self.frozen = check_bool(frozen, "frozen", "KeyIndex")
        self.max_capacity = max_capacity
        self.eviction = eviction
        self.min_count = min_count
        # Re-entrant: `save_own_variables` calls `keys()`.
        object.__setattr__(self, "_index_lock", threading.RLock())
        self._set_rows({})
        self._clear_usage()
        self.built = True

    def _set_rows(self, rows):
        # A plain dict: Keras would wrap an attribute dict in a TrackedDict,
        # which inspects every value it stores.
        object.__setattr__(self, "_rows", rows)

    def _clear_usage(self):
        """Empties the state of a bounded index beside `_rows`."""
        # Plain containers, as `_rows`. Per row (`row - first_row`), in
        # the columns of `_usage` (NumPy, grown geometrically): its key's
        # admission serial, the tick (growing lookup) it was last seen in,
        # and its appearances since admitted.
        for name, value in (
            ("_usage", np.zeros((0, 3), np.int64)),
            # `"lru"`: keys from least to most recently used, which is the
            # order of (tick, serial).
            ("_order", collections.OrderedDict()),
            # `"lfu"`: count -> keys of that count, in (tick, serial)
            # order; a heap of the counts (lazily cleaned).
            ("_buckets", {}),
            ("_heap", []),
            # Keys in row order, once eviction may reorder `_rows`.
            ("_row_keys", []),
            # `min_count`: waiting key -> appearances, least recently seen
            # first.
            ("_candidates", collections.OrderedDict()),
            ("_resets", set()),
        ):
            object.__setattr__(self, name, value)
        # The tick (growing lookups so far), the next admission serial,
        # the evictions so far.
        object.__setattr__(self, "_counters", [0, 0, 0])

    @property
    def _tracks_usage(self):
        return self.eviction is not None or self.min_count > 1

    def __len__(self):
        return len(self._rows)

    @property
    def num_rows(self):
        """Rows in use: `first_row + number of keys`."""
        return self.first_row + len(self._rows)

    @property
    def evictions(self):
        """Keys evicted so far (they gave their row to a new key)."""
        return self._counters[2]

    @property
    def capacity_left(self):
        """Rows never used yet below `max_capacity`, or `None` when
        unbounded."""
        if self.max_capacity is None:
            return None
        return self.max_capacity - self.num_rows

    @_locked
    def take_reset_rows(self):
        """Rows whose key changed (evicted, given to a new key) since the
        last call, as a sorted int64 NumPy array; clears that list.

        Rows used for the first time are not in it. A table fed by the
        index restarts these rows (values, optimizer slots) before it
        trains on them.

        Example:

        ```python
        index = kmodels.layers.KeyIndex(max_capacity=2, eviction="lru")
        index.lookup([5])  # array([1])
        index.take_reset_rows()  # array([]): row 1 is new
        index.lookup([6])  # array([1]): 6 evicts 5
        index.take_reset_rows()  # array([1])
        ```
        """
        rows = np.array(sorted(self._resets), np.int64).reshape(-1)
        self._resets.clear()
        return rows

    @_locked
    def freeze(self):
        """Stops assigning rows: unknown keys map to `oov_row` (or raise)."""
        self.frozen = True

    @_locked
    def unfreeze(self):
        self.frozen = False

    # ---------------------------------------------------------------- lookup
    def _refuse(self, error, key, position, expected):
        # `str` of NumPy numbers: their `repr` differs across NumPy versions.
        shown = repr(key) if isinstance(key, (str, bytes)) else str(key)
        raise error(
            f"KeyIndex '{self.name}' has {expected}; got "
            f"{type(key).__name__} {shown} at position {position} of the "
            "batch (flattened). No key of this batch was added."
        )

    def _int_keys(self, keys):
        """The batch as a flat int64 NumPy array, or raises."""
        if keys.dtype.kind in "iu":
            flat = keys.reshape(-1)
            if flat.size and flat.dtype.kind == "u":
                top = flat.argmax()
                if int(flat[top]) > _INT64_MAX:
                    self._refuse(
                        ValueError,
                        flat[top],
                        int(top),
                        "int64 keys, in [-2**63, 2**63)",
                    )
            return flat.astype(np.int64, copy=False)
        raw = flat = keys.reshape(-1).tolist()
        # `set(map(type, ...))` checks every key at C speed; the loop below
        # only runs to name the first bad key or to convert NumPy ints.
        if not set(map(type, raw)) <= {int}:
            for i, key in enumerate(raw):
                if isinstance(key, (bool, np.bool_)) or not isinstance(
                    key, (int, np.integer)
                ):
                    self._refuse(TypeError, key, i, "int64 keys")
            flat = [int(key) for key in raw]
        return self._int64(flat, raw)

    def _int64(self, flat, raw):
        """`flat`, a list of Python ints (`raw` as given), as an int64
        array, or raises."""
        try:
            return np.array(flat, dtype=np.int64).reshape(-1)
        except OverflowError:
            for i, key in enumerate(flat):
                if not _INT64_MIN <= key <= _INT64_MAX:
                    self._refuse(
                        ValueError, raw[i], i, "int64 keys, in [-2**63, 2**63)"
                    )
            raise

    def _string_keys(self, keys):
        """The batch as a list of `str` encodable as UTF-8, or raises."""
        flat = keys.reshape(-1).tolist()
        if not set(map(type, flat)) <= {str}:
            for i, key in enumerate(flat):
                if isinstance(key, bytes):
                    try:
                        flat[i] = key.decode("utf-8")
                    except UnicodeDecodeError:
                        self._refuse(
                            ValueError, key, i, "string keys (UTF-8 bytes)"
                        )
                elif isinstance(key, str):
                    flat[i] = str(key)
                else:
                    self._refuse(TypeError, key, i, "string keys")
        return self._utf8(flat)

    def _utf8(self, flat):
        """`flat`, a list of `str`, if UTF-8 can encode every one."""
        try:
            "".join(flat).encode("utf-8")
        except UnicodeEncodeError:
            for i, key in enumerate(flat):
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    self._refuse(
                        ValueError,
                        key,
                        i,
                        "string keys encodable as UTF-8 (no lone surrogates)",
                    )
        return flat

    def lookup(self, keys, grow=None):
        """Rows of `keys` (any shape) as an int64 NumPy array.

        The whole batch is checked first: a refused batch (a `TypeError`
        for a key of the wrong type, a `ValueError` for an int64 key out
        of range or a string not encodable as UTF-8, a `KeyError` for an
        unknown key of a frozen index without `oov_row`) adds no key. A
        bounded index also refuses, with a `ValueError` and nothing
        changed, a batch it has no rows for (see the class docstring).

        New keys get rows in order of first appearance in the flattened
        batch. The work per key runs in NumPy and C, not in Python loops:
        a long batch (8,192 int64 keys, 65,536 strings or more) is first
        reduced to its distinct keys with a NumPy sort (of the keys, or of
        the strings' hashes), so only those reach the index's dict. An
        index with `eviction` or `min_count > 1` counts the batch's
        distinct keys in C and updates their usage a batch at a time, in
        NumPy, when it grows; its lookups without growth take the path of
        an unbounded index and change nothing.

        Args:
            keys: array-like of keys.
            grow: bool or `None`. Assign rows to new keys; `None` means
                "unless frozen". `grow=True` on a frozen index raises.

        Returns:
            An int64 NumPy array of the shape of `keys`.

        Example:

        ```python
        index = kmodels.layers.KeyIndex("int64")
        index.lookup([[10**12, 7], [7, 3]])  # array([[1, 2], [2, 3]])
        ```
        """
        # Checking and grouping the keys reads no state: done before the
        # lock, so that threads wait only for the index's own work.
        shape, flat = self._checked_keys(keys)
        grouped = None
        admits = self._tracks_usage and grow is not False
        if not admits and len(flat) >= _DEDUPLICATE_FROM[self.key_dtype]:
            if self.key_dtype == "string":
                grouped = _distinct_strings(flat)
            else:
                grouped = _distinct_ints(flat)
        if grouped is None and self.key_dtype == "int64":
            flat = flat.tolist()
        with self._index_lock:
            if grow is None:
                grow = not self.frozen
            if grow and self.frozen:
                raise ValueError(f"KeyIndex '{self.name}' is frozen.")
            if grow and self._tracks_usage:
                return self._admit(flat).reshape(shape)
            if grouped is not None:
                distinct, first, inverse = grouped
                found = self._rows_of(distinct, first, grow, True)
                return found[inverse].reshape(shape)
            found = self._rows_of(flat, np.arange(len(flat)), grow, False)
        return found.reshape(shape)

    def _checked_keys(self, keys):
        """`(shape, flat)` of a batch: its shape and its keys, checked, as
        a flat int64 array or a list of `str`; or raises."""
        plain = str if self.key_dtype == "string" else int
        if type(keys) is list and set(map(type, keys)) <= {plain}:
            # A flat list of plain keys needs no NumPy object array.
            if plain is str:
                return (len(keys),), self._utf8(keys)
            return (len(keys),), self._int64(keys, keys)
        if not isinstance(keys, np.ndarray) or keys.dtype.kind == "b":
            keys = np.asarray(keys, dtype=object)
        if self.key_dtype == "string":
            return keys.shape, self._string_keys(keys)
        return keys.shape, self._int_keys(keys)

    def _rows_of(self, keys, first, grow, distinct):
        """Rows of `keys`, a list of checked keys of a batch (all of them,
        or its `distinct` ones) with `first`, the position in the batch of
        each one's first appearance; new keys get rows (when `grow`) in
        order of first appearance."""
        rows = self._rows
        found = np.array(
            list(map(rows.get, keys, itertools.repeat(-1))), np.int64
        ).reshape(-1)
        missing = np.flatnonzero(found < 0)
        if not missing.size:
            return found
        # `first` holds distinct positions: any sort is exact.
        missing = missing[np.argsort(first[missing])]
        new_keys = list(map(keys.__getitem__, missing.tolist()))
        if grow:
            # Only now, with every key checked, does the index change;
            # `dict.fromkeys` keeps the first of repeated keys.
            start = self.first_row + len(rows)
            new = new_keys if distinct else list(dict.fromkeys(new_keys))
            if self.max_capacity is not None:
                room = self.max_capacity - start
                if len(new) > room:
                    self._refuse_full(new[room])
            rows.update(zip(new, range(start, start + len(new))))
            if distinct:
                found[missing] = np.arange(start, start + len(new))
            else:
                found[missing] = list(map(rows.__getitem__, new_keys))
        elif self.oov_row is None:
            raise KeyError(
                f"KeyIndex '{self.name}' is frozen and has no row "
                f"for key {new_keys[0]!r}."
            )
        else:
            found[missing] = self.oov_row
        return found

    def _refuse_full(self, key):
        raise ValueError(
            f"KeyIndex '{self.name}' is full: max_capacity="
            f"{self.max_capacity} rows are in use and eviction=None, so the "
            f"new key {key!r} gets no row. No key of this batch was added. "
            "Pass eviction='lru' or 'lfu' to reuse rows, or a larger "
            "max_capacity."
        )

    def _admit(self, keys):
        """Rows of `keys` (a flat list of checked keys) on a growing lookup
        of an index that tracks usage (`eviction`, `min_count`)."""
        # Distinct keys in order of first appearance, with their
        # appearances in the batch: counted in C. Each distinct key is
        # looked up in the index once; its usage lives in NumPy arrays
        # by row, updated a batch at a time.
        seen = collections.Counter(keys)
        distinct = list(seen)
        occurrences = np.fromiter(seen.values(), np.int64, len(distinct))
        rows, candidates = self._rows, self._candidates
        found = np.fromiter(
            map(rows.get, distinct, itertools.repeat(-1)),
            np.int64,
            len(distinct),
        )
        known = np.flatnonzero(found >= 0)
        unknown = np.flatnonzero(found < 0).tolist()
        if self.min_count > 1:
            least = self.min_count
            new, waiting = [], []
            for i in unknown:
                key = distinct[i]
                if candidates.get(key, 0) + seen[key] >= least:
                    new.append(i)
                else:
                    waiting.append(i)
        else:
            new, waiting = unknown, ()
        new_keys = [distinct[i] for i in new]
        start = self.num_rows
        grown = len(new)
        if self.max_capacity is not None:
            grown = min(grown, self.max_capacity - start)
        evicted = len(new) - grown
        if evicted:
            if self.eviction is None:
                self._refuse_full(new_keys[grown])
            evictable = len(rows) - len(known)
            if evicted > evictable:
                raise ValueError(
                    f"KeyIndex '{self.name}' is full (max_capacity="
                    f"{self.max_capacity}) and this batch has {len(new)} "
                    f"new keys to admit, but only {max(grown, 0)} unused "
                    f"rows and {evictable} rows of keys absent from the "
                    "batch (a key of the batch is never evicted). No key "
                    "of this batch was added. Use smaller batches or a "
                    "larger max_capacity."
                )
        # Checked: only now does the index change.
        counters = self._counters
        counters[0] += 1
        tick = counters[0]
        self._reserve(start + grown - self.first_row)
        usage = self._usage
        slots = found[known] - self.first_row
        by_serial = np.argsort(usage[slots, _SERIAL])
        known, slots = known[by_serial], slots[by_serial]
        known_keys = [distinct[i] for i in known.tolist()]
        if self.eviction == "lfu":
            before = usage[slots, _COUNT].tolist()
            for key, count in zip(known_keys, before):
                self._unbucket(key, count)
            victims = [self._least_frequent() for _ in range(evicted)]
        usage[slots, _COUNT] += occurrences[known]
        usage[slots, _TICK] = tick
        if self.eviction == "lfu":
            after = usage[slots, _COUNT].tolist()
            for key, count in zip(known_keys, after):
                self._bucket(key, count)
        elif self.eviction == "lru":
            order = self._order
            collections.deque(map(order.move_to_end, known_keys), maxlen=0)
            victims = [order.popitem(last=False)[0] for _ in range(evicted)]
        free = list(range(start, start + grown))
        if evicted:
            free.extend(map(rows.pop, victims))
            self._resets.update(free[grown:])
            counters[2] += evicted
        rows.update(zip(new_keys, free))
        found[new] = free
        slots = found[new] - self.first_row
        serial = counters[1]
        counters[1] = serial + len(new)
        usage[slots, _SERIAL] = np.arange(serial, counters[1])
        usage[slots, _TICK] = tick
        usage[slots, _COUNT] = occurrences[new]
        if self.eviction is not None:
            row_keys = self._row_keys
            row_keys.extend(new_keys[:grown])
            for key, row in zip(new_keys[grown:], free[grown:]):
                row_keys[row - self.first_row] = key
            if self.eviction == "lfu":
                for key, count in zip(new_keys, occurrences[new].tolist()):
                    self._bucket(key, count)
            else:
                self._order.update(dict.fromkeys(new_keys))
        if self.min_count > 1:
            for key in new_keys:
                candidates.pop(key, None)
            for i in waiting:
                key = distinct[i]
                candidates[key] = candidates.pop(key, 0) + seen[key]
            limit = self._candidate_limit()
            while len(candidates) > limit:
                candidates.popitem(last=False)
            found[waiting] = self.oov_row
        if len(distinct) == len(keys):
            return found  # no key repeats: `distinct` is `keys`
        # Small and fresh in memory: faster than the index's dict.
        local = dict(zip(distinct, found.tolist()))
        return np.fromiter(map(local.__getitem__, keys), np.int64, len(keys))

    def _reserve(self, slots):
        """Grows `_usage` (geometrically) to hold `slots` rows."""
        size = len(self._usage)
        if slots > size:
            size = max(slots, 2 * size, 1024)
            if self.max_capacity is not None:
                size = min(size, self.max_capacity - self.first_row)
            usage = np.zeros((size, 3), np.int64)
            usage[: len(self._usage)] = self._usage
            object.__setattr__(self, "_usage", usage)

    def _candidate_limit(self):
        """Most waiting keys whose counts a `min_count` index keeps."""
        if self.max_capacity is None:
            return max(_CANDIDATES_FLOOR, len(self._rows))
        return max(_CANDIDATES_FLOOR, self.max_capacity)

    def _bucket(self, key, count):
        """Files `key` last among the keys of its `count` (`"lfu"`)."""
        keys = self._buckets.get(count)
        if keys is None:
            keys = self._buckets[count] = collections.OrderedDict()
            heapq.heappush(self._heap, count)
            if len(self._heap) > 2 * len(self._buckets) + 64:
                # Counts of emptied buckets: drop them all at once.
                self._heap[:] = list(self._buckets)
                heapq.heapify(self._heap)
        keys[key] = None

    def _unbucket(self, key, count):
        keys = self._buckets[count]
        del keys[key]
        if not keys:
            del self._buckets[count]

    def _least_frequent(self):
        """Removes and returns the key to evict first (`"lfu"`)."""
        heap, buckets = self._heap, self._buckets
        while heap[0] not in buckets:
            heapq.heappop(heap)
        count = heap[0]
        keys = buckets[count]
        key = keys.popitem(last=False)[0]
        if not keys:
            del buckets[count]
        return key

    @_locked
    def keys(self):
        """Keys in row order."""
        if self.eviction is not None:
            return list(self._row_keys)
        return list(self._rows)

    @_locked
    def lookup_layer(self):
        """A TensorFlow lookup layer giving every key the row `lookup` gives
        it now, frozen: unknown keys map to `oov_row`.

        The layer is a snapshot of the index (keys added afterwards are
        unknown to it) wrapping a `tf.lookup.StaticHashTable`, like
        `keras.layers.IntegerLookup` / `StringLookup`: it runs TensorFlow
        ops and returns TensorFlow int64 tensors of the shape of its
        input, in a `tf.data` pipeline on every backend or in a TensorFlow
        graph, not inside a model compiled by JAX or torch. It takes
        string tensors (UTF-8) for a `"string"` index, integer tensors
        for an `"int64"` one, and raises a `TypeError` otherwise. To serve
        a model on raw keys, see `kmodels.models.export_with_keys`.

        Returns:
            A `keras.layers.Layer` mapping keys to int64 rows.

        Raises:
            ValueError: the index has `oov_row=None` (frozen, it raises a
                `KeyError` for an unknown key, which a table cannot
                express).

        Example:

        ```python
        index = kmodels.layers.KeyIndex("string")
        index.lookup(["sku-9", "sku-2"])  # array([1, 2])
        rows = index.lookup_layer()
        rows(tf.constant(["sku-2", "sku-7"]))  # [2, 0]
        dataset = dataset.map(lambda k, y: (rows(k), y))
        ```
        """
        return key_table(self)

    # ---------------------------------------------------------------- saving
    def _key_entries(self, kind):
        """Entry names of a list of keys: `kind` is `"key"` (the index's
        keys) or `"candidate"` (keys waiting for `min_count`)."""
        if self.key_dtype == "string":
            return (f"{kind}_bytes", f"{kind}_lengths")
        return (f"{kind}s",)

    def _entry_names(self):
        names = self._key_entries("key") + ("frozen",)
        if self._tracks_usage:
            names += ("key_serials", "key_ticks", "key_counts")
            names += self._key_entries("candidate")
            names += ("candidate_counts", "reset_rows", "counters")
        return names

    def _encode_keys(self, keys, kind, entries):
        names = self._key_entries(kind)
        if self.key_dtype == "string":
            # Weight stores hold numbers: UTF-8 bytes plus their lengths.
            encoded = [k.encode("utf-8") for k in keys]
            entries[names[0]] = np.frombuffer(b"".join(encoded), np.uint8)
            entries[names[1]] = np.array(
                [len(e) for e in encoded], np.int64
            ).reshape(-1)
        else:
            entries[names[0]] = np.array(keys, dtype=np.int64).reshape(-1)

    @_locked
    def save_own_variables(self, store):
        keys = self.keys()
        entries = {}
        self._encode_keys(keys, "key", entries)
        entries["frozen"] = np.array(int(self.frozen), np.int64)
        if self._tracks_usage:
            usage = self._usage[: len(keys)]
            for name, column in (
                ("key_serials", _SERIAL),
                ("key_ticks", _TICK),
                ("key_counts", _COUNT),
            ):
                entries[name] = np.ascontiguousarray(usage[:, column])
            candidates = self._candidates
            self._encode_keys(list(candidates), "candidate", entries)
            entries["candidate_counts"] = np.array(
                list(candidates.values()), np.int64
            ).reshape(-1)
            entries["reset_rows"] = np.array(
                sorted(self._resets), np.int64
            ).reshape(-1)
            entries["counters"] = np.array(self._counters, np.int64)
        for name, value in entries.items():
            store[name] = value
        store["checksum"] = entry_checksums(entries, self._entry_names())

    @_locked
    def load_own_variables(self, store):
        where = f"KeyIndex '{self.name}'"
        entries = checked_entries(store, self._entry_names(), where)
        frozen = entries["frozen"]
        if frozen.shape != () or int(frozen) not in (0, 1):
            raise ValueError(
                f"{where}: saved entry 'frozen' must be a scalar 0 or 1; got "
                f"shape {frozen.shape}, value {frozen.reshape(-1)[:1]}."
            )
        keys = self._saved_keys(entries, "key", where)
        if len(set(keys)) != len(keys):
            seen = set()
            twice = next(k for k in keys if k in seen or seen.add(k))
            raise ValueError(
                f"{where}: the saved keys hold {twice!r} twice; each key has "
                "one row, so the rows after it would shift. The weights "
                "file is corrupted."
            )
        rows_needed = self.first_row + len(keys)
        if self.max_capacity is not None and rows_needed > self.max_capacity:
            raise ValueError(
                f"{where}: the saved state holds {len(keys)} keys, which "
                f"need {rows_needed} rows, but max_capacity="
                f"{self.max_capacity}. Was it saved by an index with a "
                "larger max_capacity?"
            )
        usage = None
        if self._tracks_usage:
            usage = self._saved_usage(entries, keys, where)
        # Checked: only now does the index change.
        start = self.first_row
        self._set_rows(dict(zip(keys, range(start, start + len(keys)))))
        self.frozen = bool(int(frozen))
        self._clear_usage()
        if usage is not None:
            self._restore_usage(keys, *usage)

    def _saved_ints(self, entries, name, where, length=None):
        """Saved entry `name`, a 1-D integer array (of `length`), as a
        list of Python ints."""
        value = entries[name]
        if value.ndim != 1 or value.dtype.kind not in "iu":
            raise ValueError(
                f"{where}: saved entry {name!r} must be a 1-D integer "
                f"array; got shape {value.shape}, dtype {value.dtype}."
            )
        if length is not None and value.size != length:
            raise ValueError(
                f"{where}: saved entry {name!r} must hold one value per "
                f"key ({length}); got {value.size}. The weights file is "
                "corrupted."
            )
        return value.astype(np.int64).tolist()

    def _corrupted(self, where, name, what, got):
        raise ValueError(
            f"{where}: saved entry {name!r} must hold {what}; got {got}. "
            "The weights file is corrupted."
        )

    def _saved_usage(self, entries, keys, where):
        """The checked usage state of a bounded index, as
        `(serials, ticks, counts, candidates, resets, counters)`."""
        counters = entries["counters"]
        if counters.shape != (3,) or counters.dtype.kind not in "iu":
            self._corrupted(
                where,
                "counters",
                "3 integers (tick, next serial, evictions)",
                f"shape {counters.shape}, dtype {counters.dtype}",
            )
        tick, next_serial, evictions = counters.astype(np.int64).tolist()
        if min(tick, next_serial, evictions) < 0:
            self._corrupted(
                where, "counters", "non-negative counts", [tick, next_serial]
            )
        n = len(keys)
        serials = self._saved_ints(entries, "key_serials", where, n)
        ticks = self._saved_ints(entries, "key_ticks", where, n)
        counts = self._saved_ints(entries, "key_counts", where, n)
        if len(set(serials)) != n or (
            n and not 0 <= min(serials) <= max(serials) < next_serial
        ):
            self._corrupted(
                where,
                "key_serials",
                f"distinct integers in [0, {next_serial})",
                "others",
            )
        if n and not 1 <= min(ticks) <= max(ticks) <= tick:
            self._corrupted(
                where,
                "key_ticks",
                f"integers in [1, {tick}]",
                f"[{min(ticks)}, {max(ticks)}]",
            )
        if n and min(counts) < 1:
            self._corrupted(
                where, "key_counts", "integers >= 1", f"{min(counts)}"
            )
        waiting = self._saved_keys(entries, "candidate", where)
        waiting_counts = self._saved_ints(
            entries, "candidate_counts", where, len(waiting)
        )
        held = set(keys)
        limit = max(
            _CANDIDATES_FLOOR,
            n if self.max_capacity is None else self.max_capacity,
        )
        if (
            len(set(waiting)) != len(waiting)
            or any(key in held for key in waiting)
            or len(waiting) > limit
        ):
            self._corrupted(
                where,
                "candidates"
                if self.key_dtype == "int64"
                else "candidate_bytes",
                f"at most {limit} distinct keys the index does not hold",
                f"{len(waiting)} keys",
            )
        if (
            waiting
            and not 1
            <= min(waiting_counts)
            <= max(waiting_counts)
            < self.min_count
        ):
            self._corrupted(
                where,
                "candidate_counts",
                f"integers in [1, min_count={self.min_count})",
                f"[{min(waiting_counts)}, {max(waiting_counts)}]",
            )
        resets = self._saved_ints(entries, "reset_rows", where)
        top = self.first_row + n
        if resets and (
            resets != sorted(set(resets))
            or not self.first_row <= resets[0] <= resets[-1] < top
        ):
            self._corrupted(
                where,
                "reset_rows",
                f"increasing rows in [{self.first_row}, {top})",
                f"{resets[:4]}...",
            )
        candidates = collections.OrderedDict(zip(waiting, waiting_counts))
        counters = (tick, next_serial, evictions)
        return serials, ticks, counts, candidates, resets, counters

    def _restore_usage(
        self, keys, serials, ticks, counts, candidates, resets, counters
    ):
        self._reserve(len(keys))
        self._usage[: len(keys)] = np.array(
            [serials, ticks, counts], np.int64
        ).T.reshape(-1, 3)
        self._candidates.update(candidates)
        self._resets.update(resets)
        self._counters[:] = counters
        if self.eviction is None:
            return
        self._row_keys.extend(keys)
        # Least recently used first: by (tick, serial).
        used = np.lexsort(
            (np.array(serials, np.int64), np.array(ticks, np.int64))
        )
        for i in used.tolist():
            if self.eviction == "lfu":
                self._bucket(keys[i], counts[i])
            else:
                self._order[keys[i]] = None

    def _saved_keys(self, entries, kind, where):
        if self.key_dtype == "string":
            return self._saved_string_keys(entries, kind, where)
        (name,) = self._key_entries(kind)
        return self._saved_ints(entries, name, where)

    def _saved_string_keys(self, entries, kind, where):
        data_name, lengths_name = self._key_entries(kind)
        data, lengths = entries[data_name], entries[lengths_name]
        if data.ndim != 1 or data.dtype != np.uint8:
            raise ValueError(
                f"{where}: saved entry '{data_name}' must be a 1-D uint8 "
                f"array; got shape {data.shape}, dtype {data.dtype}."
            )
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
            raise ValueError(
                f"{where}: saved entry '{lengths_name}' must be a 1-D integer "
                f"array; got shape {lengths.shape}, dtype {lengths.dtype}."
            )
        lengths = lengths.astype(np.int64)
        if lengths.size and int(lengths.min()) < 0:
            raise ValueError(
                f"{where}: saved entry '{lengths_name}' holds a negative "
                f"length ({int(lengths.min())}). The weights file is "
                "corrupted."
            )
        total = int(lengths.sum(dtype=np.int64))
        if total != data.size:
            raise ValueError(
                f"{where}: saved entry '{lengths_name}' sums to {total} bytes "
                f"but '{data_name}' holds {data.size}. The weights file is "
                "corrupted."
            )
        raw = data.tobytes()
        ends = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        keys = []
        for i, (s, e) in enumerate(zip(ends, ends[1:])):
            try:
                keys.append(raw[s:e].decode("utf-8"))
            except UnicodeDecodeError:
                raise ValueError(
                    f"{where}: saved {kind} {i} ({raw[s:e]!r}) is not valid "
                    "UTF-8. The weights file is corrupted."
                ) from None
        return keys

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "key_dtype": self.key_dtype,
                "first_row": self.first_row,
                "oov_row": self.oov_row,
                "frozen": self.frozen,
                "max_capacity": self.max_capacity,
                "eviction": self.eviction,
                "min_count": self.min_count,
            }
        )
        return config


def _groups(values):
    """`(first, inverse)` of a flat NumPy array: the position where each
    distinct value first appears (in sorted order of the values) and, for
    every position, the index of its value in `first`."""
    # An unstable sort is several times faster than a stable one; ties are
    # resolved by taking the smallest position of each run.
    if not values.size:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    order = np.argsort(values)
    ordered = values[order]
    starts = np.empty(values.size, dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    bounds = np.flatnonzero(starts)
    first = np.minimum.reduceat(order, bounds)
    inverse = np.empty(values.size, dtype=np.intp)
    inverse[order] = np.repeat(
        np.arange(bounds.size), np.diff(bounds, append=values.size)
    )
    return first, inverse


def _distinct_ints(flat):
    """`(distinct, first, inverse)` of a flat int64 array: its distinct keys
    as Python ints, the position where each first appears, and for every
    position the index of its key in `distinct`."""
    first, inverse = _groups(flat)
    return flat[first].tolist(), first, inverse


def _distinct_strings(flat):
    """`(distinct, first, inverse)` of a list of `str`, as
    `_distinct_ints`, or `None` when two of its keys share a hash."""
    # Grouped by Python's (cached, 64-bit) string hash with a NumPy sort.
    # Equal keys share a hash, so there are at least as many distinct keys
    # as hash groups; as many means no two keys share a group: exact.
    hashes = np.fromiter(map(hash, flat), dtype=np.int64, count=len(flat))
    first, inverse = _groups(hashes)
    if len(first) != len(set(flat)):
        return None  # Two keys share a hash: look every key up instead.
    return list(map(flat.__getitem__, first.tolist())), first, inverse
