"""Time-to-live of a `KeyIndex` (`ttl` or `ttl_seconds`): which keys
expire, the rows they free, and the arguments and clock it takes.

A key's age is counted from the last growing `lookup` it appeared in (its
"stamp"): in growing lookups (`ttl`: the stamp is the lookup's tick, the
index's count of growing lookups) or in seconds of the index's clock
(`ttl_seconds`: the stamp is the clock's reading at that lookup, read once
per growing lookup). At the start of each growing lookup, before the batch
is looked at, every key whose age exceeds the time-to-live expires:
`now - stamp > ttl`. Keys are stamped a batch at a time, so the held rows
are kept in stamp order (an `OrderedDict`, as `LRUEviction` keeps them)
and the expired ones are a prefix: a lookup costs time in proportion to
its batch and its expiries, not to the index.
"""

import collections
import itertools
import math
import numbers
import time

import numpy as np

from kmodels.arguments import check_float
from kmodels.arguments import check_optional_int


def checked_ttl(ttl, ttl_seconds, clock, owner="KeyIndex"):
    """`(ttl, ttl_seconds, clock)` checked: at most one time-to-live, a
    clock only with `ttl_seconds`."""
    ttl = check_optional_int(ttl, "ttl", owner, minimum=1)
    if ttl_seconds is not None:
        ttl_seconds = check_float(
            ttl_seconds,
            "ttl_seconds",
            owner,
            minimum=0.0,
            exclusive_minimum=True,
        )
    if ttl is not None and ttl_seconds is not None:
        raise ValueError(
            f"{owner}: pass `ttl` (growing lookups) or `ttl_seconds` "
            f"(seconds of `clock`), not both; got ttl={ttl}, "
            f"ttl_seconds={ttl_seconds}."
        )
    if clock is not None:
        if ttl_seconds is None:
            raise ValueError(
                f"{owner}: `clock` times `ttl_seconds`; got clock={clock!r} "
                f"with ttl_seconds=None. Pass ttl_seconds, or no clock."
            )
        if not callable(clock):
            raise TypeError(
                f"{owner}: `clock` must be a callable returning seconds "
                f"(like time.time); got {clock!r} ({type(clock).__name__})."
            )
    return ttl, ttl_seconds, clock


def missing_clock(name):
    """The clock of an index loaded from a config that had a custom one: a
    function is not saved, so it refuses to guess (`time.time` would expire
    every key stamped by another clock at once)."""

    def clock():
        raise ValueError(
            f"KeyIndex '{name}' was saved with a custom `clock`, which a "
            "config cannot hold. Set it again before the next growing "
            "lookup: `index.clock = my_clock`."
        )

    clock.missing = True
    return clock


class Expiry:
    """The time-to-live state of one `KeyIndex` (held under its lock).

    Attributes:
        ttl: the time-to-live, in lookups (`by_clock=False`) or seconds.
        by_clock: whether ages are in seconds of `clock`.
        clock: the callable read once per growing lookup (`by_clock`).
        recency: `OrderedDict` row -> stamp of the held keys, least
            recently seen first (ties: admitted first).
        stamps: `OrderedDict` stamp -> number of held keys with it, in
            the same order: a lookup finds how many keys expire by its
            few distinct stamps, then takes that prefix of `recency`.
        waiting: dict, the stamp of each key waiting for `min_count`.
        free: sorted list of the rows expired keys freed and no key took
            yet.
        reading: the largest clock reading so far, or `None`.
        expired: keys expired so far.
    """

    def __init__(self, ttl, ttl_seconds, clock):
        self.by_clock = ttl_seconds is not None
        self.ttl = ttl_seconds if self.by_clock else ttl
        self.default_clock = clock is None
        self.clock = time.time if clock is None else clock
        self.clear()

    def clear(self):
        self.recency = collections.OrderedDict()
        self.stamps = collections.OrderedDict()
        self.waiting = {}
        self.free = []
        self.reading = None
        self.expired = 0

    def now(self, index):
        """The stamp of the next growing lookup of `index`; changes
        nothing. A clock reading below an earlier one counts as the
        earlier one (wall clocks step back), so stamps never decrease."""
        if not self.by_clock:
            return index._counters[0] + 1
        value = self.clock()
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (numbers.Real, np.floating, np.integer)
        ):
            raise TypeError(
                f"KeyIndex '{index.name}': `clock()` must return seconds as "
                f"a real number; got {value!r} ({type(value).__name__})."
            )
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(
                f"KeyIndex '{index.name}': `clock()` must return a finite "
                f"number of seconds; got {value}."
            )
        if self.reading is not None and value < self.reading:
            return self.reading
        return value

    def due(self, now):
        """Rows of the held keys whose age exceeds the time-to-live at
        `now`, least recently seen first."""
        count, ttl = 0, self.ttl
        for stamp, keys in self.stamps.items():
            if not now - stamp > ttl:
                break
            count += keys
        return list(itertools.islice(self.recency, count))

    def drop(self, rows):
        """Forgets `rows`, the result of `due`: their rows become free."""
        collections.deque(map(self.recency.pop, rows), maxlen=0)
        left = len(rows)
        while left:
            left -= self.stamps.popitem(last=False)[1]
        self.free.extend(rows)
        self.free.sort()
        self.expired += len(rows)

    def stamp(self, rows, victims, new_rows, now):
        """Stamps the batch's held `rows` (in order of admission) and the
        rows new keys took (`new_rows`, in order of admission, `victims`
        among them: evicted keys' rows) with `now`, most recent last."""
        recency, stamps = self.recency, self.stamps
        # Evicted keys' rows are still there, where their old keys left
        # them; their stamps and those of the batch's keys move to `now`.
        old = collections.Counter(map(recency.pop, victims))
        old.update(map(recency.__getitem__, rows))
        for stamp, keys in old.items():
            left = stamps[stamp] - keys
            if left:
                stamps[stamp] = left
            else:
                del stamps[stamp]
        collections.deque(map(recency.move_to_end, rows), maxlen=0)
        recency.update(zip(rows, itertools.repeat(now)))
        recency.update(zip(new_rows, itertools.repeat(now)))
        added = len(rows) + len(new_rows)
        if added:
            stamps[now] = stamps.pop(now, 0) + added

    def due_waiting(self, candidates, now):
        """Keys waiting for `min_count` (`candidates`, least recently seen
        first) whose age exceeds the time-to-live: their counts restart."""
        keys, ttl, stamps = [], self.ttl, self.waiting
        for key in candidates:
            if not now - stamps[key] > ttl:
                break
            keys.append(key)
        return keys

    def take_free(self, count):
        """Removes and returns the `count` lowest free rows."""
        rows = self.free[:count]
        del self.free[:count]
        return rows

    def restore(self, rows, serials, ticks, candidates, saved):
        """Rebuilds the state of a loaded index: its held `rows` with their
        admission `serials` and `ticks`, its waiting keys (`candidates`),
        and `saved`, `(free, key_seen, candidate_seen, reading, expired)`
        as `key_index_state.py` checked them."""
        free, seen, waiting, reading, expired = saved
        if not self.by_clock:
            # Stamps are ticks: ints, as a running index holds them.
            seen = [int(tick) for tick in ticks]
            waiting = [int(stamp) for stamp in waiting]
        order = np.lexsort(
            (np.array(serials, np.int64), np.array(ticks, np.int64))
        ).tolist()
        self.recency.update((rows[i], seen[i]) for i in order)
        self.stamps.update(collections.Counter(seen[i] for i in order))
        self.waiting.update(zip(candidates, waiting))
        self.free[:] = sorted(free)
        self.reading = reading
        self.expired = expired
