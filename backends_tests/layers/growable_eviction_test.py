"""Bounded tables: rows a bounded `KeyIndex` evicted and gave to a new key
restart from the row initializer (values) and fresh optimizer slots,
eagerly (`GrowableEmbedding.reset_rows`) and between the steps of
`model.fit` (`EmbeddingGrowth`), against a NumPy SGD oracle; the index and
the table survive `.keras` save/load and train on identically; a
user-defined eviction policy (FIFO) drives a bounded index in `fit` and
survives `.keras` save/load."""

import collections
import itertools

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.callbacks import LookAheadLimit
from kmodels.layers import EvictionPolicy
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.testing.row_sum import initial_rows
from kmodels.testing.row_sum import row_sum_model
from kmodels.testing.row_sum import row_sum_table
from kmodels.testing.row_sum import sgd_oracle

DIM = 4
INIT = keras.initializers.RandomUniform(-1.0, 1.0)
SEED = 11
# Rows of the bounded index, row 0 reserved: 63 keys at most.
CAPACITY = 64
LEARNING_RATE = 0.5
HOT = 6  # keys in every batch
COLD = 2  # keys per batch drawn from a larger pool
STEPS = 160
BATCH = HOT + COLD


def _numpy(variable):
    return keras.ops.convert_to_numpy(variable.value).astype(np.float64)


def _presized(capacity, reserved=0):
    # `reserved`: the rows a key index reserves start at zeros.
    return initial_rows(capacity, DIM, INIT, SEED, reserved)


# ------------------------------------------------------------ reset_rows
@pytest.mark.parametrize(
    "rule, fresh_slot",
    [
        (("adam", {"learning_rate": 0.1}), 0.0),
        (
            (
                "adagrad",
                {"learning_rate": 0.1, "initial_accumulator_value": 0.2},
            ),
            0.2,
        ),
    ],
    ids=["adam", "adagrad"],
)
def test_reset_rows_restarts_values_and_slots_only_there(rule, fresh_slot):
    table = GrowableEmbedding(
        DIM,
        initial_capacity=4,
        embeddings_initializer=INIT,
        seed=SEED,
        optimizer=rule,
    )
    ids = keras.Input(shape=(3,), dtype="int32")
    model = keras.Model(ids, table(ids))
    model.compile(optimizer="sgd", loss="mse")
    # Grows 4 -> 16 and trains every row: values and slots move.
    x = np.arange(15, dtype="int32").reshape(5, 3)
    model.fit(
        x,
        np.ones((5, 3, DIM)),
        batch_size=1,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    assert table.capacity == 16
    before = [_numpy(v) for v in (table.embeddings, *table.slot_variables)]
    step = float(_numpy(table.step))
    rows = table.reset_rows(np.array([6, 1, 13, 6], "int32"))
    np.testing.assert_array_equal(rows, [1, 6, 13])
    assert rows.dtype == np.int64
    after = [_numpy(v) for v in (table.embeddings, *table.slot_variables)]
    others = np.setdiff1d(np.arange(16), rows)
    # The rows row r got when the table first held it (a pre-sized twin).
    twin = _presized(32)
    np.testing.assert_array_equal(after[0][rows], twin[rows])
    assert not np.array_equal(before[0][rows], twin[rows])
    for slot_before, slot_after in zip(before[1:], after[1:]):
        np.testing.assert_array_equal(slot_after[rows], np.float32(fresh_slot))
        assert not np.all(slot_before[rows] == np.float32(fresh_slot))
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a[others], b[others])
    assert float(_numpy(table.step)) == step
    assert len(table.reset_rows([])) == 0


@pytest.mark.parametrize(
    "rows, error, message",
    [
        (
            [3, 16],
            ValueError,
            "reset_rows expects rows in [0, capacity=16); got 16.",
        ),
        ([-1, 2], ValueError, "expects rows in [0, capacity=16); got -1."),
        (
            np.array([1.0, 2.0]),
            TypeError,
            "reset_rows expects integer rows; got dtype float64.",
        ),
        (
            np.zeros((2, 2), "int32"),
            ValueError,
            "reset_rows expects a 1-D array of rows; got shape (2, 2).",
        ),
        (3, TypeError, "got the scalar 3. Pass [3]."),
    ],
    ids=["past_capacity", "negative", "float", "2d", "scalar"],
)
def test_reset_rows_refuses_bad_rows(rows, error, message):
    table = GrowableEmbedding(DIM, initial_capacity=16, name="t")
    table.build()
    with pytest.raises(error) as raised:
        table.reset_rows(rows)
    assert message in str(raised.value)
    assert str(raised.value).startswith("GrowableEmbedding 't'.reset_rows")


def test_table_must_hold_every_row_of_a_bounded_index():
    index = KeyIndex(max_capacity=64, eviction="lru")
    with pytest.raises(ValueError) as raised:
        GrowableEmbedding(
            DIM, initial_capacity=8, max_capacity=32, key_index=index, name="t"
        )
    assert str(raised.value) == (
        "GrowableEmbedding 't' has max_capacity=32, smaller than its "
        "key_index's max_capacity=64: the index hands out rows up to 63. "
        "Pass max_capacity=None (the table takes the index's 64) or >= 64."
    )
    with pytest.raises(ValueError, match=r"initial_capacity=128, more than"):
        GrowableEmbedding(DIM, initial_capacity=128, key_index=index)
    # max_capacity=None: the table takes the index's 64 as its limit.
    table = GrowableEmbedding(DIM, initial_capacity=8, key_index=index)
    assert table.row_limit == 64
    assert table.required_capacity(40) == 64
    # Attached after construction: refused when fit starts.
    late = GrowableEmbedding(DIM, initial_capacity=8, max_capacity=16)
    late.key_index = index
    ids = keras.Input(shape=(1,), dtype="int32")
    model = keras.Model(ids, late(ids))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"max_capacity=16, smaller than"):
        model.fit(
            np.zeros((1, 1), "int32"),
            np.zeros((1, 1, DIM)),
            verbose=0,
            callbacks=[EmbeddingGrowth()],
        )


# --------------------------------------------------------------- in fit
def _stream(seed=0, steps=STEPS, pool=240):
    """Raw int64 key batches: `HOT` keys in every batch, then `COLD` keys
    drawn from `pool` others (several hundred distinct keys in all, many
    coming back after they were evicted); and regression targets."""
    rng = np.random.default_rng(seed)
    hot = 10**12 + np.arange(HOT)
    cold = 2 * 10**12 + np.arange(pool)
    batches = []
    for _ in range(steps):
        keys = np.concatenate([hot, rng.choice(cold, COLD, replace=False)])
        target = rng.uniform(-1.0, 1.0, (BATCH, 1)).astype("float32")
        batches.append((keys, target))
    return batches


def _model(index):
    return row_sum_model(
        row_sum_table(index, DIM, INIT, SEED, LEARNING_RATE, capacity=16)
    )


def _fit(model, index, batches, max_ahead=None):
    """Fits on `batches`, looking their keys up in `index` inside the
    generator (the data pipeline). Returns the rows fed per batch, the
    growth callback and the largest look-ahead seen (batches read beyond
    the one being trained). `max_ahead`: a `LookAheadLimit` keeps the
    generator at most that many batches ahead (TensorFlow's `tf.data`
    prefetch otherwise runs ahead as far as its autotuning lets it, which
    depends on the machine's load); None measures without bounding."""
    fed = []
    pace = LookAheadLimit(max_ahead=max_ahead or 10**9)

    def generator():
        for keys, target in batches:
            rows = index.lookup(keys)
            fed.append(rows)
            yield rows.reshape(-1, 1).astype("int32"), target

    growth = EmbeddingGrowth()
    model.fit(
        pace(generator()),
        steps_per_epoch=len(batches),
        shuffle=False,
        verbose=0,
        callbacks=[growth, pace],
    )
    return fed, growth, pace.max_seen


def _oracle(table, fed, targets, resets):
    """Plain SGD on the rows of each batch, restarting the logged rows
    from `table` (the initial rows) before their step."""
    return sgd_oracle(table, fed, targets, resets, LEARNING_RATE)


def test_fit_restarts_rows_given_to_new_keys_and_matches_oracle():
    keras.utils.set_random_seed(0)
    index = KeyIndex(max_capacity=CAPACITY, eviction="lru")
    model, table = _model(index)
    batches = _stream()
    fed, growth, ahead = _fit(model, index, batches)
    assert len(fed) == STEPS
    # Bounded: the table never passed the index's rows.
    assert table.capacity <= CAPACITY
    assert index.num_rows == CAPACITY
    assert index.evictions > 100
    # One restart per eviction: a row given away in one batch is the most
    # recently used, never evicted again before the next step's restart.
    assert growth.evicted_resets == index.evictions
    reset_steps = {}
    for entry in growth.reset_log:
        assert entry["layer"] == "users"
        reset_steps.setdefault(entry["step"], []).append(entry["rows"])
    reset_rows = np.concatenate([e["rows"] for e in growth.reset_log])
    # Hot keys hold rows 1..HOT from the first batch and are never evicted.
    np.testing.assert_array_equal(fed[0][:HOT], np.arange(1, HOT + 1))
    assert all(np.array_equal(r[:HOT], fed[0][:HOT]) for r in fed)
    assert not np.isin(reset_rows, fed[0][:HOT]).any()
    # Every row that changed key was restarted after its old key's last
    # step and no later than its new key's first step. Keras fetched at
    # most `ahead` batches beyond the one training; an LRU key is evicted
    # only after >= (63 - HOT) / COLD batches without it, so the look-ahead
    # never reaches it.
    assert ahead < (CAPACITY - 1 - HOT) // COLD
    owner, last, changed = {}, {}, 0
    for step, (rows, (keys, _)) in enumerate(zip(fed, batches)):
        for row, key in zip(rows.tolist(), keys.tolist()):
            if row in owner and owner[row] != key:
                changed += 1
                restarted = [
                    s
                    for s, rs in reset_steps.items()
                    if last[row] < s <= step and any(row in r for r in rs)
                ]
                assert restarted, (row, step)
            owner[row], last[row] = key, step
    # Evicted keys that came back among them (their old row or another).
    returned = sum(
        1
        for step, (keys, _) in enumerate(batches)
        for key in keys[HOT:].tolist()
        if any(key in k[HOT:] for k, _ in batches[:step])
    )
    assert changed > 50 and returned > 50
    # Exact values: SGD from the initializer, restarts included.
    targets = [t for _, t in batches]
    expected = _oracle(_presized(CAPACITY, 1), fed, targets, reset_steps)
    np.testing.assert_allclose(
        _numpy(table.embeddings),
        expected[: table.capacity],
        atol=1e-5,
        rtol=0,
    )


def test_bounded_state_survives_save_load_and_trains_on_identically(
    tmp_path,
):
    keras.utils.set_random_seed(0)
    # 23 key rows: cold keys are evicted within a dozen batches.
    index = KeyIndex(max_capacity=24, eviction="lru")
    model, table = _model(index)
    batches = _stream(seed=1, steps=60, pool=80)
    # An LRU key is evicted after missing 8 batches or more: a pipeline
    # that reads fewer ahead of training restarts each row exactly.
    _fit(model, index, batches[:30], max_ahead=2)
    assert index.evictions > 0
    path = str(tmp_path / "bounded.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    loaded_table = loaded.get_layer("users")
    loaded_index = loaded_table.key_index
    assert loaded_index is not index
    assert loaded_index.keys() == index.keys()
    assert loaded_index.evictions == index.evictions
    np.testing.assert_array_equal(
        _numpy(loaded_table.embeddings), _numpy(table.embeddings)
    )
    fed, growth, ahead = _fit(model, index, batches[30:], max_ahead=2)
    fed_loaded, growth_loaded, ahead_loaded = _fit(
        loaded, loaded_index, batches[30:], max_ahead=2
    )
    assert max(ahead, ahead_loaded) <= 2
    # The loaded index evicts exactly as the original.
    for a, b in zip(fed, fed_loaded):
        np.testing.assert_array_equal(a, b)
    assert growth.evicted_resets == growth_loaded.evicted_resets > 0
    assert loaded_index.keys() == index.keys()
    np.testing.assert_allclose(
        _numpy(loaded_table.embeddings),
        _numpy(table.embeddings),
        atol=1e-6,
        rtol=0,
    )


# ------------------------------------------------ a user-defined policy
class FIFOEviction(EvictionPolicy):
    """Evicts the key admitted first (never one of the current batch)."""

    def __init__(self):
        self.queue = collections.OrderedDict()  # rows, first admitted first

    def clear(self):
        self.queue.clear()

    def admit(self, rows, counts):
        self.queue.update(dict.fromkeys(rows))

    def use(self, rows, previous, counts, evict):
        held = set(rows)
        victims = list(
            itertools.islice((r for r in self.queue if r not in held), evict)
        )
        for row in victims:
            del self.queue[row]
        return victims

    # The admission order is not in the index's usage record's recency
    # order: saved as the policy's own state.
    def get_state(self):
        return {"queue": np.array(list(self.queue), np.int64)}

    def set_state(self, state):
        self.queue = collections.OrderedDict.fromkeys(state["queue"].tolist())


def _fifo_oracle(batches, max_capacity, first_row=1):
    """Rows of each batch and keys evicted by each, one key at a time: new
    keys take unused rows, then the rows of the keys admitted first (never
    a key of the batch)."""
    rows, admitted, fed, evicted = {}, [], [], []
    for batch in batches:
        new = [k for k in dict.fromkeys(batch) if k not in rows]
        start = first_row + len(rows)
        grown = min(len(new), max_capacity - start)
        victims = [k for k in admitted if k not in batch][: len(new) - grown]
        free = list(range(start, start + grown)) + [rows[k] for k in victims]
        for key in victims:
            del rows[key]
            admitted.remove(key)
        for key, row in zip(new, free):
            rows[key] = row
            admitted.append(key)
        fed.append([rows[k] for k in batch])
        evicted.append(victims)
    return fed, evicted, admitted


# A, B, ... as raw int64 ids. Four key rows (row 0 reserved), two keys per
# batch. FIFO evicts A at step 5 (LRU would evict B: A was used at step 1),
# B at 6, C at 8; each victim was last used 4 or more steps before, so the
# look-ahead of `fit` (measured below) never holds it.
_A, _B, _C, _D, _E, _F, _G = (10**12 + i for i in range(7))
FIFO_BATCHES = [
    [_A, _B],
    [_A, _C],
    [_C, _D],
    [_C, _D],
    [_D, _C],
    [_E, _D],
    [_F, _E],
    [_D, _E],
    [_A, _D],
]


def test_user_policy_fifo_evicts_in_fit_and_survives_save_load(tmp_path):
    keras.utils.set_random_seed(0)
    index = KeyIndex(max_capacity=5, eviction=FIFOEviction())
    table = row_sum_table(index, DIM, INIT, SEED, LEARNING_RATE, capacity=5)
    model, table = row_sum_model(table)
    rng = np.random.default_rng(3)
    batches = [
        (
            np.array(keys, np.int64),
            rng.uniform(-1.0, 1.0, (2, 1)).astype("float32"),
        )
        for keys in FIFO_BATCHES
    ]
    evicted = []

    class _Logged:
        # The generator's lookups, with the keys each one evicted.
        def lookup(self, keys):
            before = set(index.keys())
            rows = index.lookup(keys)
            evicted.append(sorted(before - set(index.keys())))
            return rows

    fed, growth, ahead = _fit(model, _Logged(), batches, max_ahead=2)
    expected_fed, expected_evicted, admitted = _fifo_oracle(FIFO_BATCHES, 5)
    assert [r.tolist() for r in fed] == expected_fed
    assert evicted == expected_evicted == [[]] * 5 + [[_A], [_B], [], [_C]]
    assert ahead < 3
    assert index.keys() == [_E, _F, _A, _D] and index.evictions == 3
    queue = index.lookup(admitted, grow=False).tolist()
    assert list(index.eviction.queue) == queue == [4, 1, 2, 3]
    # Each evicted row restarted once; values: SGD with those restarts.
    reset_steps = {}
    for entry in growth.reset_log:
        reset_steps.setdefault(entry["step"], []).append(entry["rows"])
    restarted = np.concatenate([e["rows"] for e in growth.reset_log])
    assert sorted(restarted.tolist()) == [1, 2, 3]
    targets = [t for _, t in batches]
    oracle_rows = [np.array(r) for r in expected_fed]
    expected = _oracle(_presized(5, 1), oracle_rows, targets, reset_steps)
    np.testing.assert_allclose(
        _numpy(table.embeddings), expected[: table.capacity], atol=1e-6, rtol=0
    )
    # Saved with the model: the policy's config and its own state.
    assert index.get_config()["eviction"]["class_name"] == "FIFOEviction"
    path = str(tmp_path / "fifo.keras")
    model.save(path)
    loaded = keras.saving.load_model(
        path, custom_objects={"FIFOEviction": FIFOEviction}
    )
    loaded_table = loaded.get_layer("users")
    copy = loaded_table.key_index
    assert copy is not index and type(copy.eviction) is FIFOEviction
    assert copy.keys() == index.keys() and copy.evictions == 3
    # Not the recency order the usage record alone would restore
    # ([2, 1, 4, 3]): the policy's saved state.
    assert list(copy.eviction.queue) == queue
    np.testing.assert_array_equal(
        _numpy(loaded_table.embeddings), _numpy(table.embeddings)
    )
    # A further new key evicts D on both: admitted first of those held
    # (LRU would evict F, last used at step 6).
    for each in (index, copy):
        each.take_reset_rows()
        assert each.lookup([_G]).tolist() == [4]
        assert each.take_reset_rows().tolist() == [4]
        assert each.keys() == [_E, _F, _A, _G]
        assert list(each.eviction.queue) == [1, 2, 3, 4]
