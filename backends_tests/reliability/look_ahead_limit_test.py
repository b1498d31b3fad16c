"""`kmodels.callbacks.LookAheadLimit`: `fit` reads a wrapped generator at
most `max_ahead` batches beyond the step that trains, on every backend
(TensorFlow's `tf.data` prefetch otherwise reads as far ahead as its
autotuning lets it); its refusals, and the reads that cannot wait."""

import threading
import time
import warnings

import keras
import numpy as np
import pytest

from backends_tests.refusals import raises_exactly
from kmodels.callbacks import LookAheadLimit
from kmodels.callbacks import LookAheadWarning

STEPS = 40
SLOW = 10


class _Begun(keras.callbacks.Callback):
    """Counts the train steps begun. Steps after the first `SLOW` take
    10 ms more: the reader, slow at first, falls behind, TensorFlow's
    autotuning deepens its prefetch, then the reader runs ahead."""

    def __init__(self):
        super().__init__()
        self.begun = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.begun += 1

    def on_train_batch_end(self, batch, logs=None):
        if self.begun > SLOW:
            time.sleep(0.01)


def test_fit_reads_at_most_max_ahead_batches_beyond_the_training_step():
    begun = _Begun()
    # Per read: the batch's index minus the step training when it was read.
    ahead = []

    def generator():
        rng = np.random.default_rng(0)
        # 10 batches more than fit trains: TensorFlow's prefetch goes on
        # reading when the last step began.
        for i in range(STEPS + 10):
            if i < SLOW:
                time.sleep(0.03)
            ahead.append(i - max(begun.begun - 1, 0))
            yield rng.random((4, 2), "float32"), rng.random((4, 1), "float32")

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    pace = LookAheadLimit(max_ahead=1, timeout=30)
    start = time.perf_counter()
    history = model.fit(
        pace(generator()),
        steps_per_epoch=STEPS,
        shuffle=False,
        verbose=0,
        callbacks=[pace, begun],
    )
    # TensorFlow's pipeline went when fit returned, without waiting for
    # its reader (the one past the last step waited for a step to begin).
    assert time.perf_counter() - start < 20
    assert begun.begun == STEPS
    assert len(history.history["loss"]) == 1
    # The reads after the last step: at most one (within the bound); the
    # end of fit ended the generator.
    assert STEPS <= len(ahead) <= STEPS + 1
    assert pace.overruns == 0
    # Without the limit, TensorFlow read 2 batches ahead from batch 11 on
    # (measured twice); JAX and torch read one batch per step.
    assert max(ahead) == 1
    assert pace.max_seen == 1
    # Keras' generator adapter reads batch 1 before step 0 begins.
    assert ahead[1] == 1


@pytest.mark.backend_independent(reason="argument checks; no Keras call")
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"max_ahead": 0},
            "LookAheadLimit: `max_ahead` must be an integer >= 1; got 0 (int).",
        ),
        (
            {"max_ahead": True},
            "LookAheadLimit: `max_ahead` must be an integer >= 1; got True "
            "(bool).",
        ),
        (
            {"timeout": 0},
            "LookAheadLimit: `timeout` must be a finite number > 0; got 0 "
            "(int).",
        ),
        (
            {"timeout": float("nan")},
            "LookAheadLimit: `timeout` must be a finite number > 0; got nan "
            "(float).",
        ),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with raises_exactly(ValueError, message):
        LookAheadLimit(**kwargs)


def _trains_elsewhere(pace):
    """`on_train_begin` from another thread, as when TensorFlow's prefetch
    thread reads the generator."""
    thread = threading.Thread(target=pace.on_train_begin)
    thread.start()
    thread.join()


def _read_past_bound(pace, batches, message):
    """Reads batches 0 to 3 of `batches = pace(range(5))` with no step
    begun: batch 2 goes past `max_ahead=1` with exactly one warning,
    `message`, and batch 3 without another."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [next(batches), next(batches)] == [0, 1]
        assert not caught
        assert next(batches) == 2
        assert next(batches) == 3  # past the bound again: no second warning
    assert [(w.category, str(w.message)) for w in caught] == [
        (LookAheadWarning, message)
    ]
    assert pace.overruns == 2
    assert pace.max_seen == 3


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_read_that_waited_timeout_goes_on_with_one_warning():
    pace = LookAheadLimit(max_ahead=1, timeout=0.05)
    batches = pace(range(5))
    _trains_elsewhere(pace)
    start = time.perf_counter()
    _read_past_bound(
        pace,
        batches,
        "LookAheadLimit(max_ahead=1): batch 2 read 2 batches ahead of "
        "training, because no train step began for 0.05 s; reads go past "
        "the bound while this lasts (see `overruns`).",
    )
    # Batches 2 and 3 each waited the timeout.
    assert time.perf_counter() - start >= 0.1


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_read_past_the_bound_in_the_training_thread_goes_on_at_once():
    pace = LookAheadLimit(max_ahead=1, timeout=30)
    batches = pace(range(5))
    pace.on_train_begin()  # this thread trains
    start = time.perf_counter()
    _read_past_bound(
        pace,
        batches,
        "LookAheadLimit(max_ahead=1): batch 2 read 2 batches ahead of "
        "training, because fit read it in the thread that trains; reads go "
        "past the bound while this lasts (see `overruns`).",
    )
    assert time.perf_counter() - start < 5


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_limit_missing_from_the_callbacks_is_named_at_once():
    pace = LookAheadLimit(max_ahead=1, timeout=30)
    start = time.perf_counter()
    _read_past_bound(
        pace,
        pace(range(5)),
        "LookAheadLimit(max_ahead=1): batch 2 read 2 batches ahead of "
        "training, because the LookAheadLimit is not in fit's callbacks; "
        "reads go past the bound while this lasts (see `overruns`).",
    )
    assert time.perf_counter() - start < 5


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_waiting_reader_goes_on_when_the_step_begins():
    pace = LookAheadLimit(max_ahead=1, timeout=30)
    batches = pace(range(5))
    _trains_elsewhere(pace)
    assert [next(batches), next(batches)] == [0, 1]
    read = []
    reader = threading.Thread(target=lambda: read.append(next(batches)))
    reader.start()
    reader.join(0.1)
    assert read == []  # waits for step 1
    pace.on_train_batch_begin(0)  # step 0: batch 2 would be 2 ahead
    reader.join(0.1)
    assert read == []
    pace.on_train_batch_begin(1)
    reader.join(30)
    assert read == [2]
    assert pace.max_seen == 1 and pace.overruns == 0


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_the_end_of_fit_ends_a_waiting_reader():
    pace = LookAheadLimit(max_ahead=1, timeout=30)
    batches = pace(range(5))
    _trains_elsewhere(pace)
    assert [next(batches), next(batches)] == [0, 1]
    read = []
    reader = threading.Thread(target=lambda: read.append(list(batches)))
    reader.start()
    reader.join(0.1)
    assert read == []
    start = time.perf_counter()
    pace.on_train_end()
    reader.join(30)
    # The generator ended without reading batch 2.
    assert read == [[]]
    assert time.perf_counter() - start < 5
    assert pace.overruns == 0


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_data_that_is_not_iterable_is_refused():
    with raises_exactly(
        TypeError,
        "LookAheadLimit: expected an iterable of batches (a generator, "
        "say); got int.",
    ):
        LookAheadLimit()(5)


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_limit_with_no_wrapped_data_warns_when_fit_starts():
    pace = LookAheadLimit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pace.on_train_begin()
        pace.on_train_end()
        pace([])  # wrapped for the next fit: no warning there
        pace.on_train_begin()
    assert [(w.category, str(w.message)) for w in caught] == [
        (
            LookAheadWarning,
            "LookAheadLimit(max_ahead=2) is in fit's callbacks, but no "
            "generator was wrapped with it for this fit: nothing is "
            "limited. Pass the wrapped data: fit(pace(generator), ..., "
            "callbacks=[pace]).",
        )
    ]
