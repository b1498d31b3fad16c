"""Nothing lost when threads share kmodels objects.

- `KeyIndex` under 8 plain threads and under `keras.utils.PyDataset`
  workers (threads): every key keeps one row, rows have no gaps or
  duplicates, a save/load round trip gives the same mapping (and, bounded,
  evicts as the original), and a table fed by workers that look keys up
  ahead of the step is never handed a row it cannot hold; its weights
  equal a NumPy SGD oracle of the batches in training order. The first
  `fit` and `evaluate` of a `Translator` or `Autoencoder` on a
  `PyDataset(workers=4)` use every batch once, in order.
- Models: a call from another thread while an entry point (`fit`) runs is
  refused with a `RuntimeError` before it reads or changes anything, on
  every backend (JAX's trainer holds the variables outside the model
  during `fit`); the running `fit` ends as a serial one does. The
  "checked up front" state of an entry point is its own: a nested
  `evaluate` or `predict` on other data is checked batch by batch.
- Seeded `Translator.generate` called from two threads at once returns
  exactly the serial result (the sampler's random state is an input of its
  compiled loop); `generate` while `fit` runs in another thread is
  refused as the entry points are.

Python switches threads every 5 ms by default; the fixture `racy` makes it
switch every microsecond, so that the races these tests guard against show
in a short run (before the lock, the unbounded index gave duplicate rows in
every run of `test_key_index_under_threads`).
"""

import sys
import threading
import time

import keras
import keras_hub
import numpy as np
import pytest

from backends_tests.refusals import raises_exactly
from kmodels.callbacks import EmbeddingGrowth
from kmodels.contracts.hook import running
from kmodels.layers import KeyIndex
from kmodels.layers import PositionalEmbedding
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import Translator
from kmodels.seq2seq import decoding
from kmodels.seq2seq import masked_loss
from kmodels.testing.row_sum import initial_rows
from kmodels.testing.row_sum import row_sum_model
from kmodels.testing.row_sum import row_sum_table
from kmodels.testing.row_sum import sgd_oracle

THREADS = 8
BATCHES = 2400  # over all threads
KEYS_PER_BATCH = 48
BASE = 10**12  # int64 keys well past int32


@pytest.fixture
def racy():
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def _in_threads(count, work):
    """Runs `work(i)` for i < count in `count` threads; re-raises the first
    error any of them raised."""
    errors = []

    def run(i):
        try:
            work(i)
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _mapping(index):
    """`{key: row}` of every key, read without growing."""
    keys = index.keys()
    return dict(zip(keys, index.lookup(keys, grow=False).tolist()))


def _reloaded(index):
    """A new index of the same config that loaded `index`'s saved state."""
    store = {}
    index.save_own_variables(store)
    copy = KeyIndex.from_config(index.get_config())
    copy.load_own_variables(store)
    return copy


def _assert_consistent(index):
    """Distinct rows, one per key, in the range the index accounts for."""
    mapping = _mapping(index)
    rows = sorted(mapping.values())
    assert len(mapping) == len(index)
    assert len(set(rows)) == len(rows), "two keys share a row"
    if index.max_capacity is None:
        # Rows first_row .. num_rows - 1, each used once: no gap.
        assert rows == list(range(index.first_row, index.num_rows))
        assert index.num_rows == rows[-1] + 1
    else:
        assert index.first_row <= rows[0] and rows[-1] < index.max_capacity
    copy = _reloaded(index)
    assert copy.keys() == index.keys()
    assert _mapping(copy) == mapping
    return mapping, copy


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"max_capacity": 700, "eviction": "lru"},
        {"max_capacity": 700, "eviction": "lfu"},
    ],
    ids=["unbounded", "lru", "lfu"],
)
def test_key_index_under_threads(racy, config):
    index = KeyIndex(**config)
    rng = np.random.default_rng(0)
    # 2,000 distinct keys, drawn with a skew: some come back often.
    pool = BASE + rng.permutation(2000)
    batches = [
        pool[np.minimum(rng.zipf(1.3, KEYS_PER_BATCH), 2000) - 1]
        for _ in range(BATCHES)
    ]
    seen = [[] for _ in range(THREADS)]
    resets = []

    def work(i):
        for batch in batches[i::THREADS]:
            rows = index.lookup(batch)
            seen[i].append((batch, rows))
            if i == 0:
                # The table's side, taking reset rows meanwhile.
                resets.append(index.take_reset_rows())

    _in_threads(THREADS, work)
    mapping, copy = _assert_consistent(index)
    if not config:
        # Unbounded: every lookup of a key, in any thread, gave its row.
        for batch, rows in (pair for part in seen for pair in part):
            assert [mapping[k] for k in batch.tolist()] == rows.tolist()
        assert len(index) == len(np.unique(np.concatenate(batches)))
        return
    assert len(index) == 699 and index.evictions > 1000
    taken = np.concatenate(resets + [index.take_reset_rows()])
    assert taken.size and taken.min() >= 1 and taken.max() < 700
    # The copy holds the same recency and counts: it evicts as the original.
    stream = [BASE + rng.integers(0, 4000, KEYS_PER_BATCH) for _ in range(50)]
    for batch in stream:
        np.testing.assert_array_equal(copy.lookup(batch), index.lookup(batch))
    assert copy.evictions == index.evictions
    assert copy.keys() == index.keys()


# ---------------------------------------------- PyDataset workers in fit
DIM = 4
LEARNING_RATE = 0.5
STEPS = 48
HOT, COLD = 6, 2  # keys per batch: always the same ones, and new ones
SEED = 3
INIT = keras.initializers.RandomUniform(-1.0, 1.0)


class _Begun(keras.callbacks.Callback):
    """Counts the train batches begun (training thread)."""

    def __init__(self):
        super().__init__()
        self.begun = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.begun += 1


class _Keys(keras.utils.PyDataset):
    """Batch `i`: its keys looked up in `index` by the worker threads, the
    rows kept (by batch, in training order) with how many train batches had
    begun when the lookup ran."""

    def __init__(self, index, batches, begun, **kwargs):
        super().__init__(**kwargs)
        self.index, self.batches, self.begun = index, batches, begun
        self.fed = [None] * len(batches)
        self.ahead = [0] * len(batches)

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        keys, target = self.batches[i]
        rows = self.index.lookup(keys)
        self.fed[i] = rows
        # Batches begun before this one's lookup: it ran `i - begun` ahead.
        self.ahead[i] = i - (self.begun.begun - 1)
        return rows.reshape(-1, 1).astype("int32"), target


def _stream(pool):
    rng = np.random.default_rng(SEED)
    hot = BASE + np.arange(HOT)
    batches = []
    for _ in range(STEPS):
        cold = BASE + 100 + rng.choice(pool, COLD, replace=False)
        keys = np.concatenate([hot, cold])
        target = rng.normal(size=(HOT + COLD, 1)).astype("float32")
        batches.append((keys, target))
    return batches


def _fit_with_workers(index, batches):
    keras.utils.set_random_seed(0)
    model, table = row_sum_model(
        row_sum_table(index, DIM, INIT, SEED, LEARNING_RATE, capacity=8)
    )
    # Keras' first `fit` after `compile` reads one batch to build the loss
    # (JAX and torch), then restarts the PyDataset while its workers'
    # queue still holds the batches they prefetched: the epoch trains
    # those again and never reaches its last ones (Keras 3.15, pinned in
    # backend_differences_test.py). Built here, on row 0, it reads none.
    model.evaluate(np.zeros((1, 1), "int32"), np.zeros((1, 1)), verbose=0)
    begun = _Begun()
    data = _Keys(index, batches, begun, workers=4, max_queue_size=6)
    growth = EmbeddingGrowth()
    model.fit(
        data, epochs=1, shuffle=False, verbose=0, callbacks=[begun, growth]
    )
    return table, data, growth


def _sgd_oracle(initial, fed, targets, resets):
    return sgd_oracle(initial, fed, targets, resets, LEARNING_RATE)


def _initial_rows(capacity):
    # Row 0, the key index's reserved row, starts at zeros.
    return initial_rows(capacity, DIM, INIT, SEED, reserved=1)


@pytest.mark.parametrize("bounded", [False, True], ids=["unbounded", "lru"])
def test_pydataset_workers_feed_a_growing_table_exactly(bounded):
    """`PyDataset(workers=4)` looks keys up ahead of the step, in threads:
    the table grows (and, bounded, restarts evicted rows) for every batch
    before it trains on it; rows handed out ahead of the table's growth are
    no error; the weights equal SGD over the batches in training order."""
    # Bounded: 40 rows (row 0 reserved) for 6 hot keys and 2 new ones per
    # batch: cold keys are evicted after about 16 batches without them,
    # far more than the pipeline looks ahead.
    index = KeyIndex(max_capacity=40, eviction="lru") if bounded else KeyIndex()
    batches = _stream(pool=np.arange(400 if bounded else 90))
    table, data, growth = _fit_with_workers(index, batches)
    _assert_consistent(index)
    # Every batch was looked up in a worker; some ahead of the step before
    # theirs (at most the queue, 6, plus the 4 workers' batches).
    assert all(rows is not None for rows in data.fed)
    assert 1 <= max(data.ahead) <= 6 + 4
    resets = {}
    for entry in growth.reset_log:
        resets.setdefault(entry["step"], []).append(entry["rows"])
        # Only rows the table held at that step were restarted.
        assert entry["rows"].max() < table.capacity
    if bounded:
        assert table.capacity == 40 and index.evictions > 40
        assert growth.evicted_resets > 40
    else:
        assert resets == {} and table.capacity >= index.num_rows
    expected = _sgd_oracle(
        _initial_rows(table.capacity),
        data.fed,
        [target for _, target in batches],
        resets,
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(table.embeddings.value),
        expected,
        atol=1e-5,
        rtol=0,
    )


class _Slow(keras.utils.PyDataset):
    """Batch `i` of `batches`; batch 0 comes late, so the other workers
    fill the queue meanwhile."""

    def __init__(self, batches, **kwargs):
        super().__init__(**kwargs)
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        if i == 0:
            time.sleep(0.2)
        return self.batches[i]


def _own_model(kind):
    keras.utils.set_random_seed(4)
    if kind == "translator":
        model = Translator(20, 20, 8, start_id=1, end_id=2)
    else:
        model = Autoencoder(20, 8)
    model.compile(
        keras.optimizers.SGD(0.5), loss=masked_loss, metrics=["accuracy"]
    )
    return model


def _own_batches(kind, count=6):
    rng = np.random.default_rng(6)
    batches = []
    for _ in range(count):
        ids = rng.integers(1, 20, size=(3, 4, 5)).astype("int32")
        if kind == "translator":
            batches.append(((ids[0], ids[1]), ids[2]))
        else:
            batches.append((ids[0], ids[0]))
    return batches


@pytest.mark.parametrize("kind", ["translator", "autoencoder"])
def test_pydataset_workers_train_kmodels_models_on_every_batch_in_order(kind):
    """The first `fit` and `evaluate` after `compile` on a
    `PyDataset(workers=4)`: every batch once, in order, on every backend
    (was, on JAX and torch: Keras read a batch to build the loss, restarted
    the data, trained the queued batches first and never reached the last
    ones; plain Keras models still do, `backend_differences_test.py`)."""
    batches = _own_batches(kind)
    model = _own_model(kind)
    model.fit(
        _Slow(batches, workers=4, max_queue_size=6), shuffle=False, verbose=0
    )
    serial = _own_model(kind)
    for x, y in batches:
        serial.train_on_batch(x, y)
    for got, want in zip(model.weights, serial.weights):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(got),
            keras.ops.convert_to_numpy(want),
            atol=1e-6,
            rtol=0,
            err_msg=got.path,
        )
    if kind == "translator":
        fresh = _own_model(kind)
        got = fresh.evaluate(
            _Slow(batches, workers=4, max_queue_size=6), verbose=0
        )
        want = [
            fresh.evaluate(x, y, batch_size=4, verbose=0) for x, y in batches
        ]
        # Equal batches: the epoch's figures are the batches' means.
        np.testing.assert_allclose(got, np.mean(want, axis=0), atol=1e-6)


# ------------------------------------------------ models and threads
VOCAB, LENGTH = 10, 4


def _positional_model():
    keras.utils.set_random_seed(5)
    ids = keras.Input((LENGTH,), dtype="int32")
    embedded = PositionalEmbedding(
        keras.layers.Embedding(VOCAB, 8), LENGTH, name="positions"
    )(ids)
    outputs = keras.layers.Dense(1)(keras.ops.mean(embedded, axis=1))
    model = keras.Model(ids, outputs)
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


def _state(model):
    return [
        keras.ops.convert_to_numpy(v).copy()
        for v in model.weights + model.optimizer.variables
    ]


GOOD = np.arange(8 * LENGTH).reshape(8, LENGTH) % VOCAB
BAD = GOOD.copy()
BAD[1, 2] = VOCAB
TARGET = np.linspace(-1.0, 1.0, 8, dtype="float32").reshape(8, 1)


class _Pause(keras.callbacks.Callback):
    """Holds `fit` at its second batch until released."""

    def __init__(self):
        super().__init__()
        self.inside = threading.Event()
        self.release = threading.Event()

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 1:
            self.inside.set()
            assert self.release.wait(60)


def _adopted_model():
    """A plain functional model after its first call: kmodels checks (and
    keeps one thread in) its entry points from then on. (The first call
    itself ran before kmodels saw the model: docs/reliability.md.)"""
    model = _positional_model()
    model.fit(GOOD, TARGET, batch_size=8, shuffle=False, verbose=0)
    return model


def test_calls_from_another_thread_during_fit_are_refused():
    serial = _adopted_model()
    serial.fit(GOOD, TARGET, batch_size=2, epochs=2, shuffle=False, verbose=0)
    model = _adopted_model()
    layer = model.get_layer("positions")
    pause = _Pause()
    finished = []

    def train():
        model.fit(
            GOOD,
            TARGET,
            batch_size=2,
            epochs=2,
            shuffle=False,
            verbose=0,
            callbacks=[pause],
        )
        finished.append(True)

    trainer = threading.Thread(target=train, name="trainer")
    trainer.start()
    try:
        assert pause.inside.wait(60)
        message = (
            "Functional '{model}' is running `fit` in thread 'trainer'; {what} "
            "from thread 'MainThread' is refused: an entry point (fit, "
            "evaluate, predict, *_on_batch) holds the model's weights while "
            "it runs (outside the model on JAX). Call it once that one "
            "returns, from that thread (a callback), or on a copy of the "
            "model per thread (keras.models.clone_model, then set_weights)."
        )
        calls = {
            f"`predict` of Functional '{model.name}'": lambda x: model.predict(
                x, verbose=0
            ),
            f"`evaluate` of Functional '{model.name}'": lambda x: (
                model.evaluate(x, TARGET, verbose=0)
            ),
            f"`fit` of Functional '{model.name}'": lambda x: model.fit(
                x, TARGET, verbose=0
            ),
            f"`predict_on_batch` of Functional '{model.name}'": (
                model.predict_on_batch
            ),
            f"a call of PositionalEmbedding '{layer.name}'": layer,
        }
        for what, call in calls.items():
            for data in (GOOD, BAD):
                with pytest.raises(RuntimeError) as caught:
                    call(data)
                assert str(caught.value) == message.format(
                    model=model.name, what=what
                )
        # An eager call of the model reaches its kmodels layer, whose
        # refusal Keras' functional call re-raises with its own preamble.
        with pytest.raises(RuntimeError) as caught:
            model(GOOD)
        assert message.format(
            model=model.name,
            what=f"a call of PositionalEmbedding '{layer.name}'",
        ) in str(caught.value)
    finally:
        pause.release.set()
        trainer.join()
    assert finished == [True]
    # Nothing the refused calls did reached the model: it trained as the
    # serial run did, and it answers calls again.
    for got, want in zip(_state(model), _state(serial)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        model.predict(GOOD, verbose=0),
        serial.predict(GOOD, verbose=0),
        rtol=1e-6,
        atol=1e-6,
    )


class _BadData(keras.utils.PyDataset):
    """One batch holding an id past the vocabulary."""

    def __len__(self):
        return 1

    def __getitem__(self, i):
        return BAD, TARGET


def test_nested_entry_points_check_their_own_data():
    """`fit` on arrays checks them up front and skips its steps' checks;
    the `evaluate` it runs for validation on a `PyDataset`, and a
    `predict` a callback runs in the same thread, check their batches."""
    model = _adopted_model()
    message = (
        "PositionalEmbedding: inputs must lie in [0, 10) (vocabulary_size=10)"
        "; got values [10] (min 0, max 10)"
    )
    with raises_exactly(ValueError, message):
        model.fit(
            GOOD, TARGET, batch_size=4, verbose=0, validation_data=_BadData()
        )

    class PredictBad(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.predict(_BadData(), verbose=0)

    before = _state(model)
    with raises_exactly(ValueError, message):
        model.fit(
            GOOD, TARGET, batch_size=4, verbose=0, callbacks=[PredictBad()]
        )
    # The epoch trained before the callback refused its own batch.
    after = _state(model)
    assert any(not np.array_equal(a, b) for a, b in zip(after, before))
    assert all(np.isfinite(a).all() for a in after)


# ------------------------------------------------------ generate
np_ = keras.ops.convert_to_numpy
VOCAB_C, VOCAB_T, UNITS, MAX_LENGTH = 9, 12, 8, 5
START, END = 1, 2
CONTEXT = np.array([[3, 4, 5, 6, 7], [8, 3, 0, 0, 0], [6, 6, 4, 0, 0]], "int32")
# Each thread makes at least `ROUNDS` calls, and more until `SECONDS` have
# passed (a few on torch's eager loop, hundreds where the loop is compiled).
ROUNDS, SECONDS = 4, 1.0


@pytest.fixture(scope="module")
def translator():
    model = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END)
    model.build((CONTEXT.shape, (3, 1)))
    # Spread-out logits: draws differ from seed to seed.
    rng = np.random.default_rng(5)
    model.set_weights(
        [
            rng.uniform(-1.0, 1.0, tuple(w.shape)).astype("float32")
            for w in model.weights
        ]
    )
    return model


def _generate(model, request):
    ids, _, scores = model.generate(
        CONTEXT, MAX_LENGTH, return_scores=True, **request
    )
    return np_(ids), np_(scores)


def test_seeded_generate_gives_the_serial_result_under_threads(translator):
    model = translator
    # One instance shared by both threads: a seeded call restarts its
    # stream. Every request runs the same compiled loop (top-k, k=5).
    shared = keras_hub.samplers.TopKSampler(k=5)
    requests = [
        dict(sampler="top_k", k=5, seed=2),
        dict(sampler="top_k", k=5, seed=3),
        dict(sampler="top_k", k=5, temperature=0.5, seed=2),
        dict(sampler=shared, seed=4),
    ]
    serial = [_generate(model, r) for r in requests]
    assert decoding.loop_count(model) == 1
    # The requests draw different sequences (else the test shows nothing).
    for a, b in ((0, 1), (0, 2), (0, 3)):
        assert not np.array_equal(serial[a][0], serial[b][0])
    barrier = threading.Barrier(2)
    calls, mismatches, errors = [0, 0], [], []

    def worker(thread):
        try:
            barrier.wait()
            deadline = time.monotonic() + SECONDS
            i = 0
            while i < ROUNDS or time.monotonic() < deadline:
                # The threads go through the requests in opposite orders.
                n = (i if thread else -1 - i) % len(requests)
                ids, scores = _generate(model, requests[n])
                if not np.array_equal(ids, serial[n][0]) or not np.allclose(
                    scores, serial[n][1], rtol=1e-6, atol=1e-6
                ):
                    mismatches.append((thread, i, n))
                i += 1
            calls[thread] = i
        except Exception as error:  # reported by the assertion below
            errors.append(repr(error))

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    # Frequent thread switches: the interleavings of a busy server.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert mismatches == [], f"{len(mismatches)} of {sum(calls)} calls"
    assert min(calls) >= ROUNDS
    # The serial result is still what a call on its own returns.
    for request, (ids, _) in zip(requests, serial):
        np.testing.assert_array_equal(_generate(model, request)[0], ids)


def test_generate_while_an_entry_point_runs_elsewhere_is_refused(translator):
    """`generate` reads the weights that `fit` holds (outside the model on
    JAX): refused from another thread while one of the model's entry points
    runs (held here by the same mark `fit` takes), fine once it ends."""
    inside, release = threading.Event(), threading.Event()

    def hold():
        with running(translator, "fit"):
            inside.set()
            assert release.wait(60)

    holder = threading.Thread(target=hold, name="trainer")
    holder.start()
    try:
        assert inside.wait(60)
        with pytest.raises(RuntimeError) as caught:
            translator.generate(CONTEXT, MAX_LENGTH)
        assert str(caught.value).startswith(
            f"Translator '{translator.name}' is running `fit` in thread "
            f"'trainer'; `generate` of Translator '{translator.name}' from "
            "thread 'MainThread' is refused:"
        )
    finally:
        release.set()
        holder.join()
    ids, _ = _generate(translator, dict(sampler="greedy"))
    assert ids.shape == (len(CONTEXT), MAX_LENGTH)
