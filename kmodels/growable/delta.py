"""Delta export of a `GrowableEmbedding`: what changed since a mark.

`table.mark()` returns a `DeltaMark`; `table.delta(since=mark)` returns a
`TableDelta`: the keys added (with their rows), the keys evicted, and the
rows whose values changed with their values now. Two host-side records
make it, neither of which reads the table's values:

- Rows trained: the table's `trained_at` variable, per row the step
  after the last sparse update that wrote it, written by that update
  inside the step with the optimizer slots, so every path that trains
  records its rows (`fit` with or without `EmbeddingGrowth`,
  `train_on_batch`, a custom loop; nothing for inference or a training
  call without a gradient). A mark keeps the highest step recorded; a
  delta lists the rows recorded past it.
- `RowClock`, on the table: per row, the version (a counter bumped by
  each mark) of its last change outside a step: rows restarted
  (`reset_rows`) and rows written by a warm start (`assign`).
  O(rows written), never O(table).

A delta scans both records once (NumPy comparisons over the capacity) and
reads only the changed rows.
- `KeyJournal`, on the `KeyIndex`: the keys each growing lookup added and
  each eviction released, with the version, kept only while a mark of
  the index is alive (marks are weakly referenced; older events are
  dropped). A delta replays the events since its mark: a key held at the
  mark and not now is evicted, a key held now on another row (or not
  held at the mark) is added; a key that came and went in between is in
  neither.

Marks do not survive saving: a loaded table or index (a `.keras` file,
`load_weights`, a checkpoint) starts new records, and a delta since a
mark taken before the load raises a `ValueError` (publish a full export
then, and mark again).
"""

import weakref

import numpy as np
from keras import ops

from kmodels.backend import keras_internals


class DeltaMark:
    """A point in a table's history, from `GrowableEmbedding.mark()`.

    Pass it to `delta(since=mark)`. It holds no copy of the table.
    """

    def __init__(self, table, clock, version, capacity):
        self.table = table.name
        self._table = weakref.ref(table)
        self._clock = clock
        self.version = version
        self.capacity = capacity
        # (key_index, its KeyJournal, the journal's token) at the mark.
        self._index = (None, None, None)

    def __repr__(self):
        return (
            f"DeltaMark(table={self.table!r}, version={self.version}, "
            f"capacity={self.capacity})"
        )


class TableDelta:
    """What changed in a table since a mark: `GrowableEmbedding.delta`.

    Attributes:
        table: str, the layer's name.
        keys_added: list of keys (int or str) held now that were not held
            at the mark, or held on another row; for a table without a
            `key_index`, the ids (rows) at or past the capacity of the
            mark that changed.
        key_rows: int64 NumPy array, the row of each of `keys_added`.
        keys_evicted: list of keys held at the mark and not now (evicted,
            released); empty without a `key_index`.
        rows: sorted int64 NumPy array, the rows whose values changed
            (trained, restarted, warm-started) or that a key added holds.
        values: NumPy array `(len(rows), output_dim)`, their values now.
        capacity: int, the table's rows now.
    """

    def __init__(
        self, table, keys_added, key_rows, keys_evicted, rows, values, capacity
    ):
        self.table = table
        self.keys_added = keys_added
        self.key_rows = key_rows
        self.keys_evicted = keys_evicted
        self.rows = rows
        self.values = values
        self.capacity = capacity

    @property
    def nbytes(self):
        """Bytes of the delta's arrays: keys (8 per int64 key, the UTF-8
        length of a string), rows and values."""
        return (
            _key_bytes(self.keys_added)
            + _key_bytes(self.keys_evicted)
            + self.key_rows.nbytes
            + self.rows.nbytes
            + self.values.nbytes
        )

    def __repr__(self):
        return (
            f"TableDelta(table={self.table!r}, keys_added="
            f"{len(self.keys_added)}, keys_evicted={len(self.keys_evicted)}"
            f", rows={len(self.rows)}, capacity={self.capacity})"
        )


def _key_bytes(keys):
    return sum(
        len(k.encode("utf-8")) if isinstance(k, str) else 8 for k in keys
    )


class RowClock:
    """Per row of a table, the version of its last change."""

    def __init__(self):
        self.version = 0
        self.versions = np.zeros(0, np.int64)

    def stamp(self, rows):
        """Records that `rows` (integers >= 0) change in this version."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        if not rows.size:
            return
        top = int(rows.max())
        if top >= len(self.versions):
            grown = np.zeros(max(top + 1, 2 * len(self.versions)), np.int64)
            grown[: len(self.versions)] = self.versions
            self.versions = grown
        self.versions[rows] = self.version

    def since(self, version, capacity):
        """Rows below `capacity` changed after `version`, sorted."""
        return np.flatnonzero(self.versions[:capacity] > version).astype(
            np.int64
        )


class KeyJournal:
    """The keys a `KeyIndex` added and released, while a mark is alive."""

    def __init__(self):
        self.version = 1
        self.events = []
        self.marks = weakref.WeakSet()

    def mark(self):
        token = _KeyMark(self.version)
        self.marks.add(token)
        self.version += 1
        self._trim()
        return token

    def record(self, kind, keys, rows):
        """Logs that `keys` were `"added"` at / `"released"` from `rows`."""
        if not self.marks:
            self.events.clear()
            return
        self.events.append((self.version, kind, list(keys), list(rows)))

    def _trim(self):
        if not self.marks:
            self.events.clear()
            return
        oldest = min(token.version for token in self.marks)
        drop = 0
        while drop < len(self.events) and self.events[drop][0] <= oldest:
            drop += 1
        del self.events[:drop]

    def changes(self, token, held):
        """`(added, rows, evicted)` since `token`, `held` the index's map
        from key to row now."""
        before = {}
        for version, kind, keys, rows in self.events:
            if version <= token.version:
                continue
            for key, row in zip(keys, rows):
                if key not in before:
                    before[key] = row if kind == "released" else None
        added, rows, evicted = [], [], []
        for key, old in before.items():
            row = held.get(key)
            if row is None:
                if old is not None:
                    evicted.append(key)
            elif row != old:
                added.append(key)
                rows.append(row)
        return added, np.array(rows, np.int64).reshape(-1), evicted


class _KeyMark:
    __slots__ = ("version", "__weakref__")

    def __init__(self, version):
        self.version = version


def key_journal(index, create=False):
    """The `KeyJournal` of `index` (created when `create`), or `None`."""
    journal = getattr(index, "_journal", None)
    if journal is None and create:
        journal = KeyJournal()
        object.__setattr__(index, "_journal", journal)
    return journal


def record_keys(index, kind, keys, rows):
    """Logs added or released keys in `index`'s journal, if it has one
    (called under the index's lock)."""
    journal = getattr(index, "_journal", None)
    if journal is not None:
        journal.record(kind, keys, rows)


def row_clock(table, create=False):
    """The `RowClock` of `table` (created when `create`), or `None`."""
    clock = getattr(table, "_row_clock", None)
    if clock is None and create:
        clock = RowClock()
        object.__setattr__(table, "_row_clock", clock)
    return clock


def _trained_at(table):
    """`table.trained_at` as a flat NumPy array: per row, the step after
    its last sparse update (0: none)."""
    return np.asarray(ops.convert_to_numpy(table.trained_at.value)).reshape(-1)


def stamp_rows(table, rows):
    """Records that `rows` of `table` change now, if it keeps a clock."""
    clock = getattr(table, "_row_clock", None)
    if clock is not None:
        clock.stamp(rows)


def forget(owner):
    """Drops `owner`'s records (a table or index whose state was loaded):
    marks taken before no longer apply."""
    for name in ("_row_clock", "_journal"):
        if getattr(owner, name, None) is not None:
            object.__setattr__(owner, name, None)
    # A mark of another table of this name (the one saved) meets a loaded
    # one: `delta` then tells that marks do not survive loading.
    object.__setattr__(owner, "_state_loaded", True)


def check_synced(table, where):
    """Raises a `RuntimeError` while the table's variables hold no values:
    Keras' JAX trainer keeps the state outside the variables during an
    epoch, and reading one then runs its (spent) initializer, which fails
    with a bare `TypeError`. A callback's `self.model` writes the state
    back; the table does not know its model."""
    variables = (table.embeddings, table.trained_at)
    if all(keras_internals.variable_storage(v) is not None for v in variables):
        return
    raise RuntimeError(
        f"{where}: the table's variables hold no values now: Keras' JAX "
        "trainer keeps them outside the variables while an epoch runs. In "
        "a callback, read `self.model` first (it writes them back), e.g. "
        "`self.model` before `table.delta(...)`; or call "
        "`model.jax_state_sync()`."
    )


def mark(table):
    """`GrowableEmbedding.mark`: a new `DeltaMark` of `table`."""
    if not table.built:
        table.build()
    check_synced(table, f"GrowableEmbedding '{table.name}'.mark")
    clock = row_clock(table, create=True)
    journal = token = None
    index = table.key_index
    if index is not None:
        with index._index_lock:
            journal = key_journal(index, create=True)
            token = journal.mark()
    mark = DeltaMark(table, clock, clock.version, table.capacity)
    mark.step = _trained_at(table).max(initial=0.0)
    mark._index = (index, journal, token)
    clock.version += 1
    return mark


def delta(table, since):
    """`GrowableEmbedding.delta`: the `TableDelta` of `table` since the
    `DeltaMark` `since`."""
    where = f"GrowableEmbedding '{table.name}'.delta"
    if not isinstance(since, DeltaMark):
        raise TypeError(
            f"{where} expects `since=` a DeltaMark from this table's "
            f"mark(); got {type(since).__name__}."
        )
    if since._table() is not table and not (
        since.table == table.name and getattr(table, "_state_loaded", False)
    ):
        raise ValueError(
            f"{where}: `since` is a mark of table {since.table!r}, not of "
            "this one."
        )
    index, journal, token = since._index
    if (
        since._clock is not row_clock(table)
        or index is not table.key_index
        or (index is not None and journal is not key_journal(index))
    ):
        raise ValueError(
            f"{where}: the mark was taken before this table or its "
            "key_index was loaded, restored or replaced, and marks do not "
            "survive loading. Publish a full export, then take a new "
            "mark()."
        )
    check_synced(table, where)
    capacity = table.capacity
    rows = since._clock.since(since.version, capacity)
    trained = np.flatnonzero(_trained_at(table)[:capacity] > since.step)
    rows = np.union1d(rows, trained).astype(np.int64)
    evicted = []
    if index is not None:
        with index._index_lock:
            added, key_rows, evicted = journal.changes(token, index._rows)
        held = key_rows[key_rows < capacity]
        rows = np.union1d(rows, held).astype(np.int64)
    else:
        key_rows = rows[rows >= since.capacity]
        added = key_rows.tolist()
    values = ops.convert_to_numpy(
        ops.take(table.embeddings.value, ops.convert_to_tensor(rows), axis=0)
    )
    values = np.asarray(values).reshape(len(rows), table.output_dim)
    return TableDelta(
        table.name, added, key_rows, evicted, rows, values, capacity
    )
