"""Eviction policies of a bounded `KeyIndex`: which keys give their rows to
new keys once the index is full.

A policy is a class: `EvictionPolicy` declares the hooks the index calls
(under its lock) and `LRUEviction` and `LFUEviction` implement them, as
torchrec's `MCHEvictionPolicy` and its LRU and LFU subclasses. A policy
works on rows (ints), so its state is NumPy-friendly whatever the keys.
`get` resolves the `eviction` argument of `KeyIndex` as
`keras.optimizers.get` does. docs/growable_embedding.md ("Eviction
policies") tells how to write one.
"""

import collections
import heapq

import keras
import numpy as np


@keras.saving.register_keras_serializable(package="kmodels")
class EvictionPolicy:
    """Base class of the eviction policies of a bounded `KeyIndex`.

    A policy keeps its own record of the rows the index holds and, when
    the index is full, chooses the rows whose keys are evicted. The index
    calls its hooks under its lock, once per growing `lookup`: `use` (the
    batch's held rows, then the victims), then `admit` (the rows new keys
    took). Subclasses implement `use`, `admit` and `clear`; `restore`,
    `get_state` and `set_state` when the index's usage record does not
    determine their state; `forget` to serve an index with a time-to-live
    (`ttl`). Each `KeyIndex` needs its own instance.
    docs/growable_embedding.md ("Eviction policies") tells the contract.

    Example:

    ```python
    @keras.saving.register_keras_serializable()
    class FIFOEviction(kmodels.layers.EvictionPolicy):
        # Evicts the row admitted first. (To be saved with the index, it
        # also needs `get_state`/`set_state`: see the docs.)
        def __init__(self):
            self.queue = collections.OrderedDict()

        def clear(self):
            self.queue.clear()

        def admit(self, rows, counts):
            self.queue.update(dict.fromkeys(rows))

        def use(self, rows, previous, counts, evict):
            held = set(rows)
            victims = [r for r in self.queue if r not in held][:evict]
            for row in victims:
                del self.queue[row]
            return victims

    index = kmodels.layers.KeyIndex(max_capacity=3, eviction=FIFOEviction())
    ```
    """

    # The string that selects a built-in policy (`KeyIndex(eviction=...)`).
    name = None

    def clear(self):
        """Forgets every row (a new or reloaded index)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement `clear()`."
        )

    def admit(self, rows, counts):
        """Records that new keys took `rows`.

        Args:
            rows: list of int, in order of admission.
            counts: list of int, each key's appearances in the batch that
                admitted it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement `admit(rows, counts)`."
        )

    def use(self, rows, previous, counts, evict):
        """Records a growing lookup and frees `evict` rows.

        Args:
            rows: list of int, the rows of the batch's held keys, in order
                of admission.
            previous: list of int, their appearances since admitted,
                before this batch.
            counts: list of int, the same after this batch.
            evict: int >= 0, the rows to free.

        Returns:
            A list of `evict` distinct held rows, none of them in `rows`,
            in the order new keys take them. The policy forgets them.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement "
            "`use(rows, previous, counts, evict)`."
        )

    def forget(self, rows, counts):
        """Forgets `rows`, whose keys expired (`KeyIndex(ttl=...)`), before
        the `use` of the same lookup. Needed only with a time-to-live.

        Args:
            rows: list of int, held rows, least recently used first.
            counts: list of int, their appearances since admitted.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement `forget(rows, counts)` "
            "to serve an index with a time-to-live."
        )

    def restore(self, rows, serials, ticks, counts):
        """Rebuilds the policy from a loaded index's usage record.

        The default admits `rows` from least to most recently used (by
        tick, then serial), with their counts.

        Args:
            rows: list of int, the rows held.
            serials: list of int, each row's order of admission.
            ticks: list of int, the growing lookup each was last seen in.
            counts: list of int, each one's appearances since admitted.
        """
        order = np.lexsort(
            (np.array(serials, np.int64), np.array(ticks, np.int64))
        ).tolist()
        self.admit([rows[i] for i in order], [counts[i] for i in order])

    def get_state(self):
        """State the usage record does not determine: a dict of NumPy
        arrays (the same names every time), saved with the index."""
        return {}

    def set_state(self, state):
        """Loads `get_state()`'s arrays, after `restore`."""

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __eq__(self, other):
        # `index.eviction == "lru"` holds, as when `eviction` was a string.
        if isinstance(other, str):
            return self.name is not None and other == self.name
        if type(other) is not type(self):
            return NotImplemented
        return self.get_config() == other.get_config()

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


@keras.saving.register_keras_serializable(package="kmodels")
class LRUEviction(EvictionPolicy):
    """Evicts the least recently used key (`eviction="lru"`).

    The victim is the key last seen in the earliest growing `lookup`;
    ties: the one admitted first.

    Example:

    ```python
    index = kmodels.layers.KeyIndex(max_capacity=3, eviction="lru")
    index.lookup([10, 20])  # array([1, 2])
    index.lookup([10])  # array([1])
    index.lookup([30])  # array([2]): 30 takes the row of 20
    ```
    """

    name = "lru"

    def __init__(self):
        # Rows from least to most recently used: in (tick, serial) order.
        self._order = collections.OrderedDict()

    def clear(self):
        self._order.clear()

    def admit(self, rows, counts):
        self._order.update(dict.fromkeys(rows))

    def forget(self, rows, counts):
        collections.deque(map(self._order.pop, rows), maxlen=0)

    def use(self, rows, previous, counts, evict):
        order = self._order
        collections.deque(map(order.move_to_end, rows), maxlen=0)
        return [order.popitem(last=False)[0] for _ in range(evict)]


@keras.saving.register_keras_serializable(package="kmodels")
class LFUEviction(EvictionPolicy):
    """Evicts the least frequently used key (`eviction="lfu"`).

    The victim has the fewest appearances since it was admitted (the
    admitting batch's included); ties: the least recently used.

    Example:

    ```python
    index = kmodels.layers.KeyIndex(max_capacity=3, eviction="lfu")
    index.lookup([10, 10, 20])  # array([1, 1, 2])
    index.lookup([30])  # array([2]): 20, seen once, gives its row
    ```
    """

    name = "lfu"

    def __init__(self):
        # count -> rows of that count, in (tick, serial) order; a heap of
        # the counts (lazily cleaned).
        self._buckets = {}
        self._heap = []

    def clear(self):
        self._buckets.clear()
        self._heap.clear()

    def admit(self, rows, counts):
        for row, count in zip(rows, counts):
            self._bucket(row, count)

    def forget(self, rows, counts):
        for row, count in zip(rows, counts):
            self._unbucket(row, count)

    def use(self, rows, previous, counts, evict):
        for row, count in zip(rows, previous):
            self._unbucket(row, count)
        victims = [self._least_frequent() for _ in range(evict)]
        for row, count in zip(rows, counts):
            self._bucket(row, count)
        return victims

    def _bucket(self, row, count):
        """Files `row` last among the rows of its `count`."""
        rows = self._buckets.get(count)
        if rows is None:
            rows = self._buckets[count] = collections.OrderedDict()
            heapq.heappush(self._heap, count)
            if len(self._heap) > 2 * len(self._buckets) + 64:
                # Counts of emptied buckets: drop them all at once.
                self._heap[:] = list(self._buckets)
                heapq.heapify(self._heap)
        rows[row] = None

    def _unbucket(self, row, count):
        rows = self._buckets[count]
        del rows[row]
        if not rows:
            del self._buckets[count]

    def _least_frequent(self):
        """Removes and returns the row to evict first."""
        heap, buckets = self._heap, self._buckets
        while heap[0] not in buckets:
            heapq.heappop(heap)
        count = heap[0]
        rows = buckets[count]
        row = rows.popitem(last=False)[0]
        if not rows:
            del buckets[count]
        return row


_BUILT_IN = {policy.name: policy for policy in (LRUEviction, LFUEviction)}


def get(identifier, owner="KeyIndex"):
    """An `EvictionPolicy` from `None`, a name (`"lru"`, `"lfu"`), a
    config saved by `serialize`, or an instance (returned as is)."""
    if identifier is None or isinstance(identifier, EvictionPolicy):
        return identifier
    if isinstance(identifier, str) and identifier in _BUILT_IN:
        return _BUILT_IN[identifier]()
    if isinstance(identifier, dict):
        policy = keras.saving.deserialize_keras_object(identifier)
        if isinstance(policy, EvictionPolicy):
            return policy
    raise ValueError(
        f"{owner}: `eviction` must be one of {tuple(_BUILT_IN)}"
        f"{'' if isinstance(identifier, str) else ' or an EvictionPolicy'}"
        f"; got {identifier!r} ({type(identifier).__name__})."
    )


def serialize(policy):
    """A built-in policy as its name (as `KeyIndex` configs always held
    it), any other through `keras.saving.serialize_keras_object`."""
    if policy is None:
        return None
    if type(policy) is _BUILT_IN.get(policy.name):
        return policy.name
    return keras.saving.serialize_keras_object(policy)
