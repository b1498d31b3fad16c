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
    (`take_reset_rows`). The one way a key leaves the index: eviction and
    expiry (`ttl`) both go through here. Call under the index's lock,
    once the batch is checked."""
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
    expiry = index._expiry
    expired, stale = [], ()
    if expiry is not None:
        # Expiry comes first: a key of the batch that expired is new.
        now = expiry.now(index)
        expired = expiry.due(now)
        if expired:
            # Held rows in (tick, serial) order are the recency order:
            # the expired ones are those up to the last expired row.
            held = np.flatnonzero(found >= 0)
            usage = index._usage[found[held] - first_row]
            last = index._usage[expired[-1] - first_row]
            gone = (usage[:, TICK] < last[TICK]) | (
                (usage[:, TICK] == last[TICK])
                & (usage[:, SERIAL] <= last[SERIAL])
            )
            found[held[gone]] = -1
        if index.min_count > 1 and candidates:
            stale = set(expiry.due_waiting(candidates, now))
    known = np.flatnonzero(found >= 0)
    unknown = np.flatnonzero(found < 0).tolist()
    if index.min_count > 1:
        least = index.min_count
        new, waiting = [], []
        for i in unknown:
            key = distinct[i]
            count = 0 if key in stale else candidates.get(key, 0)
            if count + seen[key] >= least:
                new.append(i)
            else:
                waiting.append(i)
    else:
        new, waiting = unknown, ()
    new_keys = [distinct[i] for i in new]
    start = index.num_rows
    # New keys take the rows expired keys freed (lowest first), then
    # never-used rows, then evicted keys' rows.
    reused = 0
    if expiry is not None:
        reused = min(len(new), len(expiry.free) + len(expired))
    grown = len(new) - reused
    if index.max_capacity is not None:
        grown = min(grown, index.max_capacity - start)
    evicted = len(new) - reused - grown
    if evicted:
        if policy is None:
            refuse_full(index, new_keys[reused + grown])
        evictable = len(rows) - len(expired) - len(known)
        if evicted > evictable:
            raise ValueError(
                f"KeyIndex '{index.name}' is full (max_capacity="
                f"{index.max_capacity}) and this batch has {len(new)} "
                f"new keys to admit, but only {max(reused + grown, 0)} unused "
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
    if policy is not None:
        if expired:
            # The policy forgets the expired rows before it chooses.
            policy.forget(
                expired, usage[np.array(expired) - first_row, COUNT].tolist()
            )
        victims = policy.use(
            (slots + first_row).tolist(),
            before.tolist(),
            after.tolist(),
            evicted,
        )
        victims, victim_keys = _checked_victims(
            index, victims, evicted, seen, expired
        )
    # Checked: only now does the index change.
    counters = index._counters
    counters[0] += 1
    tick = counters[0]
    free = []
    if expiry is not None:
        _expire(index, expired, stale, now)
        free = expiry.take_free(reused)
    free.extend(range(start, start + grown))
    reserve(index, start + grown - first_row)
    usage = index._usage
    usage[slots, COUNT] = after
    usage[slots, TICK] = tick
    if evicted:
        release(index, victim_keys, victims)
        counters[2] += evicted
        free.extend(victims)
    rows.update(zip(new_keys, free))
    record_keys(index, "added", new_keys, free)
    found[new] = free
    slots = found[new] - first_row
    serial = counters[1]
    counters[1] = serial + len(new)
    usage[slots, SERIAL] = np.arange(serial, counters[1])
    usage[slots, TICK] = tick
    usage[slots, COUNT] = occurrences[new]
    if policy is not None or expiry is not None:
        # Freed rows, never-used rows (appended), evicted keys' rows.
        row_keys = index._row_keys
        _set_row_keys(row_keys, free[:reused], new_keys[:reused], first_row)
        row_keys.extend(new_keys[reused : reused + grown])
        _set_row_keys(
            row_keys,
            free[reused + grown :],
            new_keys[reused + grown :],
            first_row,
        )
    if policy is not None:
        policy.admit(free, occurrences[new].tolist())
    if expiry is not None:
        expiry.stamp(found[known].tolist(), free[reused + grown :], free, now)
    if index.min_count > 1:
        for key in new_keys:
            candidates.pop(key, None)
        for i in waiting:
            key = distinct[i]
            candidates[key] = candidates.pop(key, 0) + seen[key]
        limit = candidate_limit(index)
        forgotten = []
        while len(candidates) > limit:
            forgotten.append(candidates.popitem(last=False)[0])
        if expiry is not None:
            _stamp_waiting(
                expiry,
                new_keys,
                [distinct[i] for i in waiting],
                forgotten,
                now,
            )
        found[waiting] = index.oov_row
    if len(distinct) == len(keys):
        return found  # no key repeats: `distinct` is `keys`
    # Small and fresh in memory: faster than the index's dict.
    local = dict(zip(distinct, found.tolist()))
    return np.fromiter(map(local.__getitem__, keys), np.int64, len(keys))


def expire(index):
    """Expires the keys of `index` (which has a time-to-live) that the next
    growing lookup would expire first; returns how many. Call under the
    index's lock."""
    expiry = index._expiry
    now = expiry.now(index)
    expired = expiry.due(now)
    stale = ()
    if index.min_count > 1 and index._candidates:
        stale = expiry.due_waiting(index._candidates, now)
    if expired and index.eviction is not None:
        counts = index._usage[np.array(expired) - index.first_row, COUNT]
        index.eviction.forget(expired, counts.tolist())
    _expire(index, expired, stale, now)
    return len(expired)


def _set_row_keys(row_keys, rows, keys, first_row):
    collections.deque(
        map(row_keys.__setitem__, [r - first_row for r in rows], keys),
        maxlen=0,
    )


def _expire(index, rows, stale, now):
    """Releases the keys of `rows` (expired) and forgets the counts of the
    waiting keys `stale`; their rows become free."""
    expiry, row_keys, first = index._expiry, index._row_keys, index.first_row
    if rows:
        slots = [row - first for row in rows]
        release(index, list(map(row_keys.__getitem__, slots)), rows)
        _set_row_keys(row_keys, rows, itertools.repeat(None), first)
        expiry.drop(rows)
    for key in stale:
        del index._candidates[key], expiry.waiting[key]
    if expiry.by_clock:
        expiry.reading = now


def _stamp_waiting(expiry, admitted, waiting, forgotten, now):
    stamps = expiry.waiting
    for key in itertools.chain(admitted, forgotten):
        stamps.pop(key, None)
    stamps.update(zip(waiting, itertools.repeat(now)))


def _checked_victims(index, victims, evicted, batch, expired=()):
    """`(rows, keys)` the policy chose to evict, once checked: `evicted`
    distinct held rows (Python ints), none of a key of `batch` nor
    `expired`."""
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
        if not any(key is None or key in batch for key in keys) and not (
            expired and set(victims) & set(expired)
        ):
            return victims, keys
    raise ValueError(
        f"KeyIndex '{index.name}': {type(index.eviction).__name__}.use "
        f"returned the rows {victims[:8]}; it must return {evicted} "
        f"distinct held rows (ints in [{first}, {index.num_rows})), none "
        "of them a row of this batch. No key of this batch was added."
    )
