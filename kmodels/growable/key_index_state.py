"""The state a `KeyIndex` writes to Keras weight stores, and its checks.

Entries, in the order of their checksums (`saved_state.py`): the keys
(`keys`, or `key_bytes` and `key_lengths`: UTF-8 bytes and their lengths,
since weight stores hold numbers), `frozen`; an index that tracks usage
(`eviction` or `min_count > 1`) adds its usage record (`key_serials`,
`key_ticks`, `key_counts`: per key in row order), the keys waiting for
`min_count` (`candidates`, or `candidate_bytes` and `candidate_lengths`)
and their counts, `reset_rows` and `counters` (tick, next serial,
evictions), then its eviction policy's own arrays as `eviction_<name>`;
an index with a time-to-live (`ttl`, `ttl_seconds`) then adds `ttl_free_rows`
(rows expired keys freed, no key took yet: the keys fill the other rows in
order), `ttl_key_seen` and `ttl_candidate_seen` (the stamp of each key and
waiting key: the tick or clock reading of the lookup it was last seen in),
`ttl_reading` (the largest clock reading, none or one) and `ttl_expired`.
Loading checks everything before the index changes.
"""

import collections

import numpy as np

from kmodels.growable.admission import COUNT
from kmodels.growable.admission import SERIAL
from kmodels.growable.admission import TICK
from kmodels.growable.admission import candidate_limit
from kmodels.growable.saved_state import checked_entries
from kmodels.growable.saved_state import entry_checksums

# The entries the columns of the usage record are saved as, in order.
_USAGE_COLUMNS = {"key_serials": SERIAL, "key_ticks": TICK, "key_counts": COUNT}
_USAGE_ENTRIES = tuple(_USAGE_COLUMNS)


def save_index(index, store):
    """Writes `index`'s state to `store` (call under the index's lock)."""
    keys = index.keys()
    entries = {}
    _encode_keys(index, keys, "key", entries)
    entries["frozen"] = np.array(int(index.frozen), np.int64)
    if index._tracks_usage:
        usage = index._usage[index.rows() - index.first_row]
        for name, column in _USAGE_COLUMNS.items():
            entries[name] = np.ascontiguousarray(usage[:, column])
        candidates = index._candidates
        _encode_keys(index, list(candidates), "candidate", entries)
        entries["candidate_counts"] = np.array(
            list(candidates.values()), np.int64
        ).reshape(-1)
        entries["reset_rows"] = np.array(
            sorted(index._resets), np.int64
        ).reshape(-1)
        entries["counters"] = np.array(index._counters, np.int64)
    if index.eviction is not None:
        for name, value in index.eviction.get_state().items():
            entries[f"eviction_{name}"] = np.asarray(value)
    if index._expiry is not None:
        _save_ttl(index, entries)
    for name, value in entries.items():
        store[name] = value
    store["checksum"] = entry_checksums(entries, _entry_names(index))


def load_index(index, store):
    """`(keys, frozen, usage, policy_state, ttl)` read from `store` and
    checked against `index`'s configuration; `usage` is `None` for an
    index that tracks none, else `(serials, ticks, counts, candidates,
    resets, counters)`; `ttl` is `None` without a time-to-live, else
    `(free_rows, key_seen, candidate_seen, reading, expired)`. Raises a
    `ValueError` naming the entry otherwise."""
    where = f"KeyIndex '{index.name}'"
    entries = checked_entries(store, _entry_names(index), where)
    frozen = entries["frozen"]
    if frozen.shape != () or int(frozen) not in (0, 1):
        raise ValueError(
            f"{where}: saved entry 'frozen' must be a scalar 0 or 1; got "
            f"shape {frozen.shape}, value {frozen.reshape(-1)[:1]}."
        )
    keys = _saved_keys(index, entries, "key", where)
    if len(set(keys)) != len(keys):
        seen = set()
        twice = next(k for k in keys if k in seen or seen.add(k))
        raise ValueError(
            f"{where}: the saved keys hold {twice!r} twice; each key has "
            "one row, so the rows after it would shift. The weights "
            "file is corrupted."
        )
    free = []
    if index._expiry is not None:
        free = _saved_free_rows(index, entries, len(keys), where)
    rows_needed = index.first_row + len(keys) + len(free)
    if index.max_capacity is not None and rows_needed > index.max_capacity:
        raise ValueError(
            f"{where}: the saved state holds {len(keys)} keys, which "
            f"need {rows_needed} rows, but max_capacity="
            f"{index.max_capacity}. Was it saved by an index with a "
            "larger max_capacity?"
        )
    usage = None
    if index._tracks_usage:
        usage = _saved_usage(index, entries, keys, where, len(free))
    policy_state = {
        name: entries[f"eviction_{name}"] for name in _policy_names(index)
    }
    ttl = None
    if index._expiry is not None:
        ttl = (free,) + _saved_ttl(index, entries, usage, where)
    return keys, bool(int(frozen)), usage, policy_state, ttl


def _key_entries(index, kind):
    """Entry names of a list of keys: `kind` is `"key"` (the index's keys)
    or `"candidate"` (keys waiting for `min_count`)."""
    if index.key_dtype == "string":
        return (f"{kind}_bytes", f"{kind}_lengths")
    return (f"{kind}s",)


def _policy_names(index):
    if index.eviction is None:
        return ()
    return tuple(index.eviction.get_state())


def _entry_names(index):
    names = _key_entries(index, "key") + ("frozen",)
    if index._tracks_usage:
        names += _USAGE_ENTRIES + _key_entries(index, "candidate")
        names += ("candidate_counts", "reset_rows", "counters")
    names += tuple(f"eviction_{n}" for n in _policy_names(index))
    if index._expiry is not None:
        names += _TTL_ENTRIES
    return names


def _encode_keys(index, keys, kind, entries):
    names = _key_entries(index, kind)
    if index.key_dtype == "string":
        encoded = [k.encode("utf-8") for k in keys]
        entries[names[0]] = np.frombuffer(b"".join(encoded), np.uint8)
        entries[names[1]] = np.array(
            [len(e) for e in encoded], np.int64
        ).reshape(-1)
    else:
        entries[names[0]] = np.array(keys, dtype=np.int64).reshape(-1)


def _saved_ints(entries, name, where, length=None):
    """Saved entry `name`, a 1-D integer array (of `length`), as a list of
    Python ints."""
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


def _corrupted(where, name, what, got):
    raise ValueError(
        f"{where}: saved entry {name!r} must hold {what}; got {got}. "
        "The weights file is corrupted."
    )


def _saved_usage(index, entries, keys, where, free=0):
    """The checked usage state of an index that tracks usage, as
    `(serials, ticks, counts, candidates, resets, counters)`."""
    counters = entries["counters"]
    if counters.shape != (3,) or counters.dtype.kind not in "iu":
        _corrupted(
            where,
            "counters",
            "3 integers (tick, next serial, evictions)",
            f"shape {counters.shape}, dtype {counters.dtype}",
        )
    tick, next_serial, evictions = counters.astype(np.int64).tolist()
    if min(tick, next_serial, evictions) < 0:
        _corrupted(
            where, "counters", "non-negative counts", [tick, next_serial]
        )
    n = len(keys)
    serials, ticks, counts = (
        _saved_ints(entries, name, where, n) for name in _USAGE_ENTRIES
    )
    if len(set(serials)) != n or (
        n and not 0 <= min(serials) <= max(serials) < next_serial
    ):
        _corrupted(
            where,
            "key_serials",
            f"distinct integers in [0, {next_serial})",
            "others",
        )
    if n and not 1 <= min(ticks) <= max(ticks) <= tick:
        _corrupted(
            where,
            "key_ticks",
            f"integers in [1, {tick}]",
            f"[{min(ticks)}, {max(ticks)}]",
        )
    if n and min(counts) < 1:
        _corrupted(where, "key_counts", "integers >= 1", f"{min(counts)}")
    waiting = _saved_keys(index, entries, "candidate", where)
    waiting_counts = _saved_ints(
        entries, "candidate_counts", where, len(waiting)
    )
    held = set(keys)
    limit = candidate_limit(index, n)
    if (
        len(set(waiting)) != len(waiting)
        or any(key in held for key in waiting)
        or len(waiting) > limit
    ):
        _corrupted(
            where,
            _key_entries(index, "candidate")[0],
            f"at most {limit} distinct keys the index does not hold",
            f"{len(waiting)} keys",
        )
    if waiting and not (
        1 <= min(waiting_counts) <= max(waiting_counts) < index.min_count
    ):
        _corrupted(
            where,
            "candidate_counts",
            f"integers in [1, min_count={index.min_count})",
            f"[{min(waiting_counts)}, {max(waiting_counts)}]",
        )
    resets = _saved_ints(entries, "reset_rows", where)
    top = index.first_row + n + free
    if resets and (
        resets != sorted(set(resets))
        or not index.first_row <= resets[0] <= resets[-1] < top
    ):
        _corrupted(
            where,
            "reset_rows",
            f"increasing rows in [{index.first_row}, {top})",
            f"{resets[:4]}...",
        )
    candidates = collections.OrderedDict(zip(waiting, waiting_counts))
    counters = (tick, next_serial, evictions)
    return serials, ticks, counts, candidates, resets, counters


def _saved_keys(index, entries, kind, where):
    if index.key_dtype == "string":
        return _saved_string_keys(index, entries, kind, where)
    (name,) = _key_entries(index, kind)
    return _saved_ints(entries, name, where)


def _saved_string_keys(index, entries, kind, where):
    data_name, lengths_name = _key_entries(index, kind)
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


# ------------------------------------------------------------ time-to-live
_TTL_ENTRIES = (
    "ttl_free_rows",
    "ttl_key_seen",
    "ttl_candidate_seen",
    "ttl_reading",
    "ttl_expired",
)


def _save_ttl(index, entries):
    expiry = index._expiry
    rows = index.rows().tolist()
    entries["ttl_free_rows"] = np.array(sorted(expiry.free), np.int64)
    entries["ttl_key_seen"] = np.array(
        [expiry.recency[row] for row in rows], np.float64
    ).reshape(-1)
    entries["ttl_candidate_seen"] = np.array(
        [expiry.waiting[key] for key in index._candidates], np.float64
    ).reshape(-1)
    reading = [] if expiry.reading is None else [expiry.reading]
    entries["ttl_reading"] = np.array(reading, np.float64)
    entries["ttl_expired"] = np.array(expiry.expired, np.int64)


def _saved_free_rows(index, entries, n, where):
    free = _saved_ints(entries, "ttl_free_rows", where)
    top = index.first_row + n + len(free)
    if free and (
        free != sorted(set(free))
        or not index.first_row <= free[0] <= free[-1] < top
    ):
        _corrupted(
            where,
            "ttl_free_rows",
            f"increasing rows in [{index.first_row}, {top})",
            f"{free[:4]}...",
        )
    return free


def _saved_stamps(entries, name, where, length, order, latest):
    """Saved stamps `name`: `length` finite floats, non-decreasing in
    `order` (least recently seen first), none past `latest`."""
    value = entries[name]
    if value.shape != (length,) or value.dtype != np.float64:
        _corrupted(
            where,
            name,
            f"{length} float64 stamps",
            f"shape {value.shape}, dtype {value.dtype}",
        )
    ordered = value[order]
    if length and not (
        np.isfinite(value).all()
        and (np.diff(ordered) >= 0).all()
        and ordered[-1] <= latest
    ):
        _corrupted(
            where,
            name,
            f"finite stamps, non-decreasing from least to most recently "
            f"seen, none past {latest}",
            "others",
        )
    return value.tolist()


def _saved_ttl(index, entries, usage, where):
    """`(key_seen, candidate_seen, reading, expired)`, checked."""
    expiry = index._expiry
    serials, ticks, _, candidates, _, counters = usage
    reading = entries["ttl_reading"]
    if (
        reading.dtype != np.float64
        or reading.shape not in ((0,), (1,))
        or not np.isfinite(reading).all()
        or (reading.size and not expiry.by_clock)
    ):
        _corrupted(
            where,
            "ttl_reading",
            "at most one finite float64 (the clock's largest reading; "
            "none for `ttl`)",
            f"shape {reading.shape}, dtype {reading.dtype}",
        )
    reading = float(reading[0]) if reading.size else None
    if expiry.by_clock:
        latest = np.inf if reading is None else reading
    else:
        latest = counters[0]
    order = np.lexsort((np.array(serials, np.int64), np.array(ticks, np.int64)))
    seen = _saved_stamps(
        entries, "ttl_key_seen", where, len(serials), order, latest
    )
    if serials and (
        (not expiry.by_clock and seen != [float(t) for t in ticks])
        or (expiry.by_clock and reading is None)
    ):
        _corrupted(
            where,
            "ttl_key_seen",
            "the stamp of each key's last lookup",
            "others",
        )
    waiting = _saved_stamps(
        entries,
        "ttl_candidate_seen",
        where,
        len(candidates),
        np.arange(len(candidates)),
        latest,
    )
    expired = entries["ttl_expired"]
    if expired.shape != () or expired.dtype.kind not in "iu" or expired < 0:
        _corrupted(
            where,
            "ttl_expired",
            "a non-negative integer",
            f"shape {expired.shape}, dtype {expired.dtype}",
        )
    return seen, waiting, reading, int(expired)
