"""The thread count of kmodels' models on a busy machine: the rule that picks
it from the free cores, the user's own choice standing, the count put back
after `fit`, and the knob (a no-op on TensorFlow and JAX). No timing here:
the speed-up lives in `benchmarks.busy` (`docs/benchmarks.md`)."""

import contextlib

import keras
import numpy as np
import pytest

import kmodels.seq2seq
from kmodels.backend import threads
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_loss

TORCH = keras.backend.backend() == "torch"
ONLY_TORCH = pytest.mark.skipif(
    not TORCH,
    reason="torch's intra-op thread count is torch's own setting; on "
    "TensorFlow and JAX the knob is a no-op, tested below",
)


@pytest.mark.backend_independent(reason="a pure function of given numbers")
@pytest.mark.parametrize(
    "cores, elsewhere, current, expected",
    [
        (2, 0, 2, 2),  # idle: torch's count
        (2, 1, 2, 1),
        (2, 2, 2, 1),  # a hog per core: one thread, never zero
        (2, 7, 2, 1),  # load 7 on 2 cores
        (8, 3, 8, 5),
        (8, 0, 4, 4),  # never above the count set now
        (1, 0, 2, 1),  # the affinity allows one core
    ],
)
def test_threads_for_picks_the_free_cores(cores, elsewhere, current, expected):
    assert threads.threads_for(cores, elsewhere, current) == expected


@pytest.mark.backend_independent(reason="reads /proc, the same anywhere")
def test_running_elsewhere_is_the_median_of_samples_less_own_tasks(
    monkeypatch,
):
    machine = iter([5, 9, 4])
    monkeypatch.setattr(threads, "_running_tasks", lambda: next(machine))
    monkeypatch.setattr(threads, "_own_running_tasks", lambda: 2)
    monkeypatch.setattr(threads, "SAMPLE_INTERVAL", 0.0)
    # Samples 3, 7, 2: the median.
    assert threads.running_elsewhere() == 3


def _busy(monkeypatch, elsewhere):
    """`elsewhere` tasks of other processes on 2 usable cores."""
    monkeypatch.setattr(threads, "running_elsewhere", lambda: elsewhere)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)


def _torch_threads():
    import torch

    return torch.get_num_threads()


class _Seen(keras.callbacks.Callback):
    """Records the torch thread count in the middle of `fit` (None on
    TensorFlow and JAX) and the count `free_core_threads` chose."""

    def __init__(self):
        super().__init__()
        self.threads = []

    def on_train_batch_begin(self, batch, logs=None):
        self.threads.append(_torch_threads() if TORCH else None)


@pytest.fixture
def chosen(monkeypatch):
    """The counts `free_core_threads()` yielded, one per entry point."""
    values = []
    original = threads.free_core_threads

    @contextlib.contextmanager
    def spy():
        with original() as value:
            values.append(value)
            yield value

    monkeypatch.setattr(threads, "free_core_threads", spy)
    return values


@pytest.fixture
def torch_count():
    """Puts torch's thread count back after a test that sets it."""
    before = _torch_threads() if TORCH else None
    yield before
    if TORCH:
        import torch

        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def translator_data():
    rng = np.random.default_rng(0)
    context = rng.integers(1, 9, (4, 5)).astype("int32")
    target_in = rng.integers(1, 7, (4, 4)).astype("int32")
    target_out = rng.integers(1, 7, (4, 4)).astype("int32")
    return (context, target_in), target_out


@pytest.fixture(scope="module")
def translator(translator_data):
    model = Translator(10, 8, 4)
    model(translator_data[0])
    model.compile(optimizer="sgd", loss=masked_loss)
    return model


def _fit(model, data):
    x, y = data
    seen = _Seen()
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[seen])
    return seen.threads


def test_fit_runs_on_the_free_cores_and_restores_the_count(
    monkeypatch, chosen, translator, translator_data, torch_count
):
    _busy(monkeypatch, elsewhere=2)
    seen = _fit(translator, translator_data)
    if TORCH:
        expected = 1 if torch_count > 1 else None
        assert chosen == [expected]
        assert seen == [1, 1]
        assert _torch_threads() == torch_count
    else:
        # The knob is a no-op: nothing chosen, nothing to put back.
        assert chosen == [None]
        assert seen == [None, None]


def test_evaluate_and_predict_run_on_the_free_cores(
    monkeypatch, chosen, translator, translator_data, torch_count
):
    _busy(monkeypatch, elsewhere=2)
    x, y = translator_data
    translator.evaluate(x, y, batch_size=2, verbose=0)
    translator.predict(x, batch_size=2, verbose=0)
    expected = 1 if TORCH and torch_count > 1 else None
    assert chosen == [expected, expected]
    if TORCH:
        assert _torch_threads() == torch_count


def test_the_count_is_restored_when_fit_raises(
    monkeypatch, chosen, translator, torch_count
):
    _busy(monkeypatch, elsewhere=2)
    bad = np.zeros((0, 5), "int32")
    with pytest.raises(ValueError):
        translator.fit((bad, bad[:, :4]), bad[:, :4], verbose=0)
    assert len(chosen) == 1
    if TORCH:
        assert _torch_threads() == torch_count


@ONLY_TORCH
def test_a_count_the_user_set_stands(
    monkeypatch, chosen, translator, translator_data, torch_count
):
    import torch

    _busy(monkeypatch, elsewhere=2)
    torch.set_num_threads(torch_count + 1)
    seen = _fit(translator, translator_data)
    assert chosen == [None]
    assert seen == [torch_count + 1] * 2
    assert torch.get_num_threads() == torch_count + 1


@ONLY_TORCH
@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_a_thread_variable_the_user_set_stands(
    monkeypatch, chosen, translator, translator_data, torch_count, variable
):
    _busy(monkeypatch, elsewhere=2)
    monkeypatch.setenv(variable, str(torch_count))
    seen = _fit(translator, translator_data)
    assert chosen == [None]
    assert seen == [torch_count] * 2


@ONLY_TORCH
@pytest.mark.parametrize("policy", ["PASSIVE", "passive"])
def test_openmps_passive_wait_keeps_torchs_count(
    monkeypatch, chosen, translator, translator_data, torch_count, policy
):
    # Sleeping threads do not spin: torch's count stands.
    _busy(monkeypatch, elsewhere=2)
    monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    seen = _fit(translator, translator_data)
    assert chosen == [None]
    assert seen == [torch_count] * 2


@ONLY_TORCH
def test_openmps_active_wait_still_runs_on_the_free_cores(
    monkeypatch, chosen, translator, translator_data, torch_count
):
    _busy(monkeypatch, elsewhere=2)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    seen = _fit(translator, translator_data)
    expected = 1 if torch_count > 1 else torch_count
    assert chosen == [1 if torch_count > 1 else None]
    assert seen == [expected] * 2
    assert _torch_threads() == torch_count


def test_the_knob_turns_it_off_and_returns_the_previous_setting(
    monkeypatch, chosen, translator, translator_data, torch_count
):
    _busy(monkeypatch, elsewhere=2)
    assert kmodels.seq2seq.adapt_threads_to_load(False) is True
    try:
        seen = _fit(translator, translator_data)
    finally:
        assert kmodels.seq2seq.adapt_threads_to_load(True) is False
    assert chosen == [None]
    assert seen == ([torch_count] * 2 if TORCH else [None, None])


def test_an_idle_machine_keeps_torchs_count(
    monkeypatch, chosen, translator, translator_data, torch_count
):
    _busy(monkeypatch, elsewhere=0)
    seen = _fit(translator, translator_data)
    assert chosen == [None]
    assert seen == ([torch_count] * 2 if TORCH else [None, None])


def test_autoencoder_fit_runs_on_the_free_cores(
    monkeypatch, chosen, torch_count
):
    _busy(monkeypatch, elsewhere=2)
    tokens = np.random.default_rng(0).integers(1, 8, (4, 5)).astype("int32")
    model = Autoencoder(8, 4)
    model.compile(optimizer="sgd", loss=masked_loss)
    model.fit(tokens, tokens, batch_size=4, epochs=1, verbose=0)
    assert chosen == [1 if TORCH and torch_count > 1 else None]
    if TORCH:
        assert _torch_threads() == torch_count


def test_the_knob_refuses_a_non_bool():
    with pytest.raises(
        TypeError,
        match=r"adapt_threads_to_load expects enabled to be True or False; "
        r"got 'yes' of type str\.",
    ):
        kmodels.seq2seq.adapt_threads_to_load("yes")


@ONLY_TORCH
def test_two_threads_share_one_count_and_the_last_puts_it_back(
    monkeypatch, torch_count
):
    """Two threads' entry points at once: torch's count is the process's,
    so the second joins the first one's count, and the count goes back
    only when the last returns (not when the first does)."""
    import threading

    import torch

    from kmodels.backend.torch import threads as torch_threads

    for name in (*torch_threads.THREAD_VARIABLES, torch_threads.WAIT_POLICY):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch_threads, "IMPORTED_THREADS", 2)
    torch.set_num_threads(2)
    both_in, first_out = threading.Barrier(2), threading.Event()
    seen = {}

    def first():
        with torch_threads.free_core_scope(lambda current: 1) as value:
            seen["first"] = value
            both_in.wait()
        first_out.set()

    def second():
        with torch_threads.free_core_scope(lambda current: 1) as value:
            seen["second"] = value
            both_in.wait()
            first_out.wait()
            seen["after_first"] = torch.get_num_threads()

    workers = [threading.Thread(target=f) for f in (first, second)]
    workers[0].start()
    while "first" not in seen:
        pass
    workers[1].start()
    for worker in workers:
        worker.join(timeout=30)
    assert seen == {"first": 1, "second": 1, "after_first": 1}
    assert torch.get_num_threads() == 2
