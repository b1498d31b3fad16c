"""`kmodels.callbacks.LookAheadLimit`: `fit` reads a wrapped generator at
most `max_ahead` batches beyond the step that trains, on every backend
(TensorFlow's `tf.data` prefetch otherwise reads as far ahead as its
autotuning lets it); its refusals and its errors."""

import threading
import time

import keras
import numpy as np
import pytest

from backends_tests.refusals import raises_exactly
from kmodels.callbacks import LookAheadError
from kmodels.callbacks import LookAheadLimit

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
        for i in range(STEPS):
            if i < SLOW:
                time.sleep(0.03)
            ahead.append(i - max(begun.begun - 1, 0))
            yield rng.random((4, 2), "float32"), rng.random((4, 1), "float32")

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    pace = LookAheadLimit(max_ahead=1)
    history = model.fit(
        pace(generator()),
        steps_per_epoch=STEPS,
        shuffle=False,
        verbose=0,
        callbacks=[pace, begun],
    )
    assert begun.begun == STEPS
    assert len(history.history["loss"]) == 1
    assert len(ahead) == STEPS
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


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_reader_waits_for_training_then_gives_up_naming_the_step():
    pace = LookAheadLimit(max_ahead=1, timeout=0.05)
    batches = pace(range(5))
    # Nothing trains: batches 0 and 1 are within the bound, batch 2 waits
    # for step 1, which never begins.
    assert [next(batches), next(batches)] == [0, 1]
    start = time.perf_counter()
    with raises_exactly(
        LookAheadError,
        "LookAheadLimit(max_ahead=1): batch 2 waited 0.05 s for step 1 to "
        "begin; 0 train steps began.",
    ):
        next(batches)
    assert time.perf_counter() - start >= 0.05


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_waiting_reader_goes_on_when_the_step_begins():
    pace = LookAheadLimit(max_ahead=1, timeout=30)
    batches = pace(range(5))
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
    assert pace.max_seen == 1


@pytest.mark.backend_independent(reason="a generator and threads; no Keras")
def test_a_read_past_the_bound_in_the_training_thread_raises_at_once():
    pace = LookAheadLimit(max_ahead=1, timeout=30)
    batches = pace(range(5))
    pace.on_train_begin()  # this thread trains
    assert [next(batches), next(batches)] == [0, 1]
    start = time.perf_counter()
    with raises_exactly(
        LookAheadError,
        "LookAheadLimit(max_ahead=1): fit read batch 2 after 0 train steps "
        "began, in the thread that trains, where waiting cannot help; raise "
        "max_ahead.",
    ):
        next(batches)
    assert time.perf_counter() - start < 5
