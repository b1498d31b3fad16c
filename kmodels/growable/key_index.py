"""`KeyIndex`: maps arbitrary keys (int64 ids, strings) to dense rows of a
table, with an optional bound, an eviction policy and admission.

This module holds the layer: its configuration, its state and the lookups
of an index that tracks no usage. The batch checks live in `key_batch.py`,
the growing lookups of a bounded or `min_count` index in `admission.py`,
the eviction policies in `eviction.py`, the saved state in
`key_index_state.py`.
"""

import collections
import functools
import itertools
import threading
import weakref

import keras
import numpy as np

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.growable import eviction as eviction_policies
from kmodels.growable.admission import admit
from kmodels.growable.admission import expire as expire_keys
from kmodels.growable.admission import refuse_full
from kmodels.growable.admission import reserve
from kmodels.growable.delta import forget as forget_marks
from kmodels.growable.delta import record_keys
from kmodels.growable.expiry import Expiry
from kmodels.growable.expiry import checked_ttl
from kmodels.growable.expiry import missing_clock
from kmodels.growable.key_batch import checked_keys
from kmodels.growable.key_batch import grouped_keys
from kmodels.growable.key_index_state import load_index
from kmodels.growable.key_index_state import save_index
from kmodels.growable.key_table import key_table

_KEY_DTYPES = ("int64", "string")


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
    NumPy int64 rows, giving each new key the next free row (`first_row,
    first_row + 1, ...` in order of arrival), so the table it feeds grows
    with the keys; `freeze()` stops that for serving. Attached to a table
    (`GrowableEmbedding(..., key_index=index)`) it is saved and loaded with
    the model. A bounded index (`max_capacity`) refuses new keys when full,
    or evicts keys for them (`eviction`); `min_count` delays admission.
    Lookups are thread-safe. docs/growable_embedding.md tells the rules
    (key checks, eviction, admission, threads, saved state) in full.

    Args:
        key_dtype: `"int64"` or `"string"`.
        first_row: int >= 0. Row of the first key; rows below it are
            reserved (padding, unknown keys).
        oov_row: int or `None`. Row of unknown keys once frozen, and of
            keys not yet admitted; a reserved row (or 0 when
            `first_row=0`). `None`: unknown keys raise a `KeyError`.
        frozen: bool. Start frozen.
        max_capacity: int > `first_row`, or `None` (unbounded). Most rows
            in use, reserved rows included.
        eviction: `None` (refuse new keys when full), `"lru"`, `"lfu"`, or
            a `kmodels.layers.EvictionPolicy`. Needs `max_capacity`.
        min_count: int >= 1. Appearances a key needs to get a row; above
            1 it needs an `oov_row`.
        ttl: int >= 1 or `None`. Time-to-live in growing lookups: a key
            absent from `ttl` growing lookups in a row expires at the
            start of the next one; its row is freed and queued for reset,
            as an evicted key's.
        ttl_seconds: float > 0 or `None`. Time-to-live in seconds of
            `clock`: a key expires at the first growing lookup more than
            `ttl_seconds` after the last one it appeared in.
        clock: callable returning seconds, for `ttl_seconds`; default
            `time.time`. Not saved in the config (set `index.clock` again
            after loading).
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

    # Keys absent from 2 growing lookups in a row expire.
    index = kmodels.layers.KeyIndex(ttl=2)
    index.lookup([10, 20])  # array([1, 2])
    index.lookup([10])
    index.lookup([10])  # 20 was absent twice: it expires at the next one
    index.lookup([30])  # array([2]): 30 takes the row 20 freed
    index.take_reset_rows()  # array([2])
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
        ttl=None,
        ttl_seconds=None,
        clock=None,
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
        policy = eviction_policies.get(eviction)
        if policy is not None and max_capacity is None:
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
        ttl, ttl_seconds, clock = checked_ttl(ttl, ttl_seconds, clock)
        if (ttl or ttl_seconds) and policy is not None:
            if type(policy).forget is eviction_policies.EvictionPolicy.forget:
                raise ValueError(
                    f"KeyIndex: with a time-to-live, the eviction policy "
                    f"forgets the rows of expired keys, but "
                    f"{type(policy).__name__} does not implement "
                    "`forget(rows, counts)`. Implement it, or pass no ttl."
                )
        if policy is not None:
            self._own(policy)
        self.ttl = ttl
        self.ttl_seconds = ttl_seconds
        # The time-to-live state (`expiry.py`), or `None`.
        object.__setattr__(
            self,
            "_expiry",
            Expiry(ttl, ttl_seconds, clock) if ttl or ttl_seconds else None,
        )
        self.key_dtype = key_dtype
        self.first_row = first_row
        self.oov_row = oov_row
        self.frozen = check_bool(frozen, "frozen", "KeyIndex")
        self.max_capacity = max_capacity
        # The `EvictionPolicy` (equal to its name, "lru" or "lfu", for the
        # built-in ones), or `None`.
        self.eviction = policy
        self.min_count = min_count
        # Re-entrant: `save_own_variables` calls `keys()`.
        object.__setattr__(self, "_index_lock", threading.RLock())
        self._set_rows({})
        self._clear_usage()
        self.built = True

    # Keys added and released while a delta mark is alive
    # (`kmodels.growable.delta`).
    _journal = None

    def _own(self, policy):
        """Makes `policy` this index's: a policy records one index's rows."""
        owner = getattr(policy, "_key_index", None)
        owner = owner() if owner is not None else None
        if owner is not None:
            raise ValueError(
                f"KeyIndex: this {type(policy).__name__} already serves "
                f"KeyIndex '{owner.name}', and a policy records the rows of "
                "one index. Pass a new instance (or a name: 'lru', 'lfu')."
            )
        policy._key_index = weakref.ref(self)

    def _set_rows(self, rows):
        # A plain dict: Keras would wrap an attribute dict in a TrackedDict,
        # which inspects every value it stores.
        object.__setattr__(self, "_rows", rows)

    def _clear_usage(self):
        """Empties the state of a bounded index beside `_rows`."""
        # Plain containers, as `_rows`. `_usage` is the usage record (see
        # `admission.py`): per row, the key's admission serial, last tick
        # and count.
        for name, value in (
            ("_usage", np.zeros((0, 3), np.int64)),
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
        if self.eviction is not None:
            self.eviction.clear()
        if self._expiry is not None:
            self._expiry.clear()

    @property
    def _tracks_usage(self):
        return (
            self.eviction is not None
            or self.min_count > 1
            or self._expiry is not None
        )

    def __len__(self):
        return len(self._rows)

    @property
    def num_rows(self):
        """Rows in use: `first_row + number of keys`, plus the rows expired
        keys freed and no key took yet (`ttl`)."""
        if self._expiry is not None:
            return self.first_row + len(self._rows) + len(self._expiry.free)
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
    def lookup(self, keys, grow=None):
        """Rows of `keys` (any shape) as an int64 NumPy array.

        The whole batch is checked first: a refused batch (a `TypeError`
        for a key of the wrong type, a `ValueError` for an int64 key out
        of range or a string not encodable as UTF-8, a `KeyError` for an
        unknown key of a frozen index without `oov_row`, a `ValueError`
        for a bounded index without rows for it) adds no key. New keys get
        rows in order of first appearance in the flattened batch.

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
        shape, flat = checked_keys(keys, self.key_dtype, self.name)
        grouped = None
        if not (self._tracks_usage and grow is not False):
            grouped = grouped_keys(flat, self.key_dtype)
        if grouped is None and self.key_dtype == "int64":
            flat = flat.tolist()
        with self._index_lock:
            if grow is None:
                grow = not self.frozen
            if grow and self.frozen:
                raise ValueError(f"KeyIndex '{self.name}' is frozen.")
            if grow and self._tracks_usage:
                return admit(self, flat).reshape(shape)
            if grouped is not None:
                distinct, first, inverse = grouped
                found = self._rows_of(distinct, first, grow, True)
                return found[inverse].reshape(shape)
            found = self._rows_of(flat, np.arange(len(flat)), grow, False)
        return found.reshape(shape)

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
                    refuse_full(self, new[room])
            rows.update(zip(new, range(start, start + len(new))))
            record_keys(self, "added", new, range(start, start + len(new)))
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

    @_locked
    def keys(self):
        """Keys in row order (rows: `rows()`)."""
        if self._expiry is not None and self._expiry.free:
            return [key for key in self._row_keys if key is not None]
        if self.eviction is not None or self._expiry is not None:
            return list(self._row_keys)
        return list(self._rows)

    # ------------------------------------------------------------ time-to-live
    @_locked
    def rows(self):
        """Rows of `keys()`, in the same order, as an int64 NumPy array:
        `first_row, first_row + 1, ...`, except the rows expired keys
        (`ttl`) freed and no key took yet.

        Example:

        ```python
        index = kmodels.layers.KeyIndex(ttl=1)
        index.lookup([10, 20])  # array([1, 2])
        index.lookup([20])
        index.lookup([20])  # 10 expires first
        index.keys(), index.rows()  # ([20], array([2]))
        ```
        """
        rows = np.arange(self.first_row, self.num_rows, dtype=np.int64)
        if self._expiry is None or not self._expiry.free:
            return rows
        return rows[[key is not None for key in self._row_keys]]

    @_locked
    def expire(self):
        """Expires now the keys the next growing lookup would expire first
        (`ttl`, `ttl_seconds`), e.g. before serving or exporting the
        index; returns how many. Counts no lookup (no tick).

        Example:

        ```python
        clock = lambda: now
        index = kmodels.layers.KeyIndex(ttl_seconds=60, clock=clock)
        now = 0.0
        index.lookup(["a", "b"])
        now = 61.0
        index.expire()  # 2: both keys are more than 60 s old
        index.keys()  # []
        ```
        """
        if self._expiry is None:
            return 0
        return expire_keys(self)

    @property
    def expirations(self):
        """Keys expired so far (`ttl`, `ttl_seconds`); 0 without."""
        return 0 if self._expiry is None else self._expiry.expired

    @property
    def clock(self):
        """The callable `ttl_seconds` reads (seconds), or `None`."""
        if self._expiry is None or not self._expiry.by_clock:
            return None
        return self._expiry.clock

    @clock.setter
    def clock(self, clock):
        if self._expiry is None or not self._expiry.by_clock:
            raise ValueError(
                f"KeyIndex '{self.name}': `clock` times `ttl_seconds`; this "
                f"index has ttl_seconds=None."
            )
        checked_ttl(None, self.ttl_seconds, clock)
        with self._index_lock:
            self._expiry.clock = clock
            self._expiry.default_clock = False

    @_locked
    def lookup_layer(self):
        """A TensorFlow lookup layer giving every key the row `lookup` gives
        it now, frozen: unknown keys map to `oov_row`.

        A snapshot of the index (a `tf.lookup.StaticHashTable`, like
        `keras.layers.StringLookup`) for `tf.data` pipelines on every
        backend and TensorFlow graphs; docs/growable_embedding.md
        ("Serving keys") tells more.

        Returns:
            A `keras.layers.Layer` mapping keys to int64 rows.

        Raises:
            ValueError: the index has `oov_row=None`.

        Example:

        ```python
        index = kmodels.layers.KeyIndex("string")
        index.lookup(["sku-9", "sku-2"])  # array([1, 2])
        rows = index.lookup_layer()
        rows(tf.constant(["sku-2", "sku-7"]))  # [2, 0]
        ```
        """
        return key_table(self)

    # ---------------------------------------------------------------- saving
    @_locked
    def save_own_variables(self, store):
        save_index(self, store)

    @_locked
    def load_own_variables(self, store):
        keys, frozen, usage, policy_state, ttl = load_index(self, store)
        # Checked: only now does the index change. Delta marks taken
        # before no longer apply.
        forget_marks(self)
        start = self.first_row
        free = [] if ttl is None else ttl[0]
        held = range(start, start + len(keys) + len(free))
        if free:
            held = sorted(set(held).difference(free))
        self._set_rows(dict(zip(keys, held)))
        self.frozen = frozen
        self._clear_usage()
        if usage is None:
            return
        serials, ticks, counts, candidates, resets, counters = usage
        held = list(held)
        reserve(self, len(keys) + len(free))
        self._usage[np.array(held, np.int64) - start] = np.array(
            [serials, ticks, counts], np.int64
        ).T.reshape(-1, 3)
        self._candidates.update(candidates)
        self._resets.update(resets)
        self._counters[:] = counters
        if self._expiry is not None:
            row_keys = [None] * (len(keys) + len(free))
            for key, row in zip(keys, held):
                row_keys[row - start] = key
            self._row_keys.extend(row_keys)
            self._expiry.restore(held, serials, ticks, candidates, ttl)
        if self.eviction is not None:
            if self._expiry is None:
                self._row_keys.extend(keys)
            self.eviction.restore(held, serials, ticks, counts)
            if policy_state:
                self.eviction.set_state(policy_state)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "key_dtype": self.key_dtype,
                "first_row": self.first_row,
                "oov_row": self.oov_row,
                "frozen": self.frozen,
                "max_capacity": self.max_capacity,
                "eviction": eviction_policies.serialize(self.eviction),
                "min_count": self.min_count,
                "ttl": self.ttl,
                "ttl_seconds": self.ttl_seconds,
            }
        )
        # A function is not saved: "custom" makes the loaded index ask for
        # it again (`from_config`).
        custom = self._expiry is not None and not self._expiry.default_clock
        config["clock"] = "custom" if custom else None
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        custom = config.pop("clock", None) == "custom"
        index = cls(**config)
        if custom and index._expiry is not None:
            index._expiry.clock = missing_clock(index.name)
            index._expiry.default_clock = False
        return index
