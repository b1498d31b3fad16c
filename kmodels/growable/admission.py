"""Growing lookups of a `KeyIndex` that tracks usage (`eviction` or
`min_count > 1`): admission, the capacity, eviction through the index's
policy, and the usage record they keep.

The usage record holds, per row (`row - first_row`), the key's admission
serial, the tick (growing lookup) it was last seen in and its appearances
since admitted, in a NumPy array grown geometrically: a growing lookup
updates it a batch at a time, in time proportional to the batch.
"""

import collections
import itertools

import numpy as np

from kmodels.growable.delta import record_keys

# Columns of the usage record.
SERIAL, TICK, COUNT = 0, 1, 2
# Fewest not-yet-admitted keys whose counts a `min_count` index keeps.
_CANDIDATES_FLOOR = 1024


def refuse_full(index, key):
    """Raises the `ValueError` of a full `index` without eviction."""
    raise ValueError(
        f"KeyIndex '{index.name}' is full: max_capacity="
        f"{index.max_capacity} rows are in use and eviction=None, so the "
        f"new key {key!r} gets no row. No key of this batch was added. "
        "Pass eviction='lru' or 'lfu' to reuse rows, or a larger "
        "max_capacity."
    )


def candidate_limit(index, held=None):
    """Most waiting keys whose counts a `min_count` index keeps, when it
    holds `held` keys (default: its own)."""
    if index.max_capacity is not None:
        return max(_CANDIDATES_FLOOR, index.max_capacity)
    return max(_CANDIDATES_FLOOR, len(index) if held is None else held)


def reserve(index, slots):
    """Grows the usage record of `index` (geometrically) to `slots` rows."""
    size = len(index._usage)
    if slots > size:
        size = max(slots, 2 * size, 1024)
        if index.max_capacity is not None:
            size = min(size, index.max_capacity - index.first_row)
        usage = np.zeros((size, 3), np.int64)
        usage[: len(index._usage)] = index._usage
        object.__setattr__(index, "_usage", usage)


def release(index, keys, rows):
    """Frees `rows`, the rows of the held `keys` (in the same order): the
    index forgets the keys and queues the rows for a reset
    (`take_reset_rows`). The one way a key leaves the index: eviction
    (and any other way a key may leave) goes through here. Call under the
    index's lock, once the batch is checked."""
    collections.deque(map(index._rows.pop, keys), maxlen=0)
    index._resets.update(rows)
    # Delta export (`kmodels.growable.delta`) sees every key that leaves.
    record_keys(index, "released", keys, rows)


def admit(index, keys):
    """Rows of `keys` (a flat list of checked keys) on a growing lookup of
    `index` (which tracks usage), called under its lock."""
    # Distinct keys in order of first appearance, with their appearances in
    # the batch: counted in C. Each distinct key is looked up in the index
    # once; its usage lives in NumPy arrays by row, updated a batch at a
    # time.
    seen = collections.Counter(keys)
    distinct = list(seen)
    occurrences = np.fromiter(seen.values(), np.int64, len(distinct))
    rows, candidates = index._rows, index._candidates
    policy, first_row = index.eviction, index.first_row
    found = np.fromiter(
        map(rows.get, distinct, itertools.repeat(-1)),
        np.int64,
        len(distinct),
    )
    known = np.flatnonzero(found >= 0)
    unknown = np.flatnonzero(found < 0).tolist()
    if index.min_count > 1:
        least = index.min_count
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
    start = index.num_rows
    grown = len(new)
    if index.max_capacity is not None:
        grown = min(grown, index.max_capacity - start)
    evicted = len(new) - grown
    if evicted:
        if policy is None:
            refuse_full(index, new_keys[grown])
        evictable = len(rows) - len(known)
        if evicted > evictable:
            raise ValueError(
                f"KeyIndex '{index.name}' is full (max_capacity="
                f"{index.max_capacity}) and this batch has {len(new)} "
                f"new keys to admit, but only {max(grown, 0)} unused "
                f"rows and {evictable} rows of keys absent from the "
                "batch (a key of the batch is never evicted). No key "
                "of this batch was added. Use smaller batches or a "
                "larger max_capacity."
            )
    usage = index._usage
    slots = found[known] - first_row
    by_serial = np.argsort(usage[slots, SERIAL])
    known, slots = known[by_serial], slots[by_serial]
    before = usage[slots, COUNT]
    after = before + occurrences[known]
    free = list(range(start, start + grown))
    if policy is not None:
        victims = policy.use(
            (slots + first_row).tolist(),
            before.tolist(),
            after.tolist(),
            evicted,
        )
        victims, victim_keys = _checked_victims(index, victims, evicted, seen)
        free.extend(victims)
    # Checked: only now does the index change.
    counters = index._counters
    counters[0] += 1
    tick = counters[0]
    reserve(index, start + grown - first_row)
    usage = index._usage
    usage[slots, COUNT] = after
    usage[slots, TICK] = tick
    if evicted:
        release(index, victim_keys, free[grown:])
        counters[2] += evicted
    rows.update(zip(new_keys, free))
    record_keys(index, "added", new_keys, free)
    found[new] = free
    slots = found[new] - first_row
    serial = counters[1]
    counters[1] = serial + len(new)
    usage[slots, SERIAL] = np.arange(serial, counters[1])
    usage[slots, TICK] = tick
    usage[slots, COUNT] = occurrences[new]
    if policy is not None:
        row_keys = index._row_keys
        row_keys.extend(new_keys[:grown])
        for key, row in zip(new_keys[grown:], free[grown:]):
            row_keys[row - first_row] = key
        policy.admit(free, occurrences[new].tolist())
    if index.min_count > 1:
        for key in new_keys:
            candidates.pop(key, None)
        for i in waiting:
            key = distinct[i]
            candidates[key] = candidates.pop(key, 0) + seen[key]
        limit = candidate_limit(index)
        while len(candidates) > limit:
            candidates.popitem(last=False)
        found[waiting] = index.oov_row
    if len(distinct) == len(keys):
        return found  # no key repeats: `distinct` is `keys`
    # Small and fresh in memory: faster than the index's dict.
    local = dict(zip(distinct, found.tolist()))
    return np.fromiter(map(local.__getitem__, keys), np.int64, len(keys))


def _checked_victims(index, victims, evicted, batch):
    """`(rows, keys)` the policy chose to evict, once checked: `evicted`
    distinct held rows (Python ints), none of a key of `batch`."""
    row_keys, first = index._row_keys, index.first_row
    victims = list(victims)
    if not set(map(type, victims)) <= {int} and all(
        isinstance(row, (int, np.integer)) and not isinstance(row, bool)
        for row in victims
    ):
        victims = [int(row) for row in victims]
    if (
        len(victims) == evicted
        and len(set(victims)) == evicted
        and set(map(type, victims)) <= {int}
        and (
            not victims
            or first <= min(victims) <= max(victims) < index.num_rows
        )
    ):
        keys = [row_keys[row - first] for row in victims]
        if not any(key in batch for key in keys):
            return victims, keys
    raise ValueError(
        f"KeyIndex '{index.name}': {type(index.eviction).__name__}.use "
        f"returned the rows {victims[:8]}; it must return {evicted} "
        f"distinct held rows (ints in [{first}, {index.num_rows})), none "
        "of them a row of this batch. No key of this batch was added."
    )
