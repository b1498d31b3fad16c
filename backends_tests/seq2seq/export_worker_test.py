"""The TensorFlow worker of `kmodels.export.tensorflow_process`: on JAX and
torch every export runs in one TensorFlow process, started by the first
export and reused by the next ones; a failed export leaves it working, a
dead one is replaced, and each error names what failed.

The probe module (`kmodels.testing.tensorflow_probe`) stands in for an
export: it reports the process it ran in. The real exports through the
worker are export_test.py's, key_serving_test.py's and
growable_delta_test.py's.
"""

import itertools
import json
import multiprocessing
import os
import re
import threading

import pytest

from kmodels.export import tensorflow_process
from kmodels.export.tensorflow_process import run_in_tensorflow

PROBE = "kmodels.testing.tensorflow_probe"

# The worker is process management in Python, the same code on JAX and
# torch; on TensorFlow the exports run in the calling process instead
# (export_in_process_test.py). Each worker start imports TensorFlow (4-5 s):
# three in all.
pytestmark = pytest.mark.backend_independent(
    reason="the worker is the same Python on JAX and torch; TensorFlow "
    "exports in its own process: export_in_process_test.py"
)


@pytest.fixture
def probe(tmp_path):
    """Runs the probe with `action`; returns the process it reported. The
    worker outlives the test, as it would in a user's process (each start
    imports TensorFlow: four in this file)."""
    calls = itertools.count()

    def run(action="ok"):
        # A file per call: two threads calling at once must not read the
        # file the other's export is writing.
        path = str(tmp_path / f"probe-{next(calls)}.json")
        run_in_tensorflow(PROBE, [path, action], "the probe")
        with open(path) as file:
            return json.load(file)

    return run


def _worker_pid():
    return tensorflow_process._WORKER[1].pid


def test_one_worker_serves_every_export_and_survives_a_failure(probe):
    first = probe()
    assert first == {"pid": _worker_pid(), "backend": "tensorflow"}
    assert first["pid"] != os.getpid()
    assert probe() == first
    # A failed export: the error names it, ends with the exception and
    # holds the error output it printed; the same worker goes on.
    with pytest.raises(RuntimeError) as raised:
        probe("raise")
    message = str(raised.value)
    assert message.startswith(
        "The TensorFlow subprocess exporting the probe failed:\n"
    )
    assert "the probe's error output\n" in message
    assert message.endswith("ValueError: the probe raised\n")
    assert probe() == first
    # Two threads exporting at once: one after the other, in the worker.
    found = []
    threads = [
        threading.Thread(target=lambda: found.append(probe())) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert found == [first, first]


def test_a_dead_worker_is_replaced_and_an_idle_one_exits(probe, monkeypatch):
    first = probe()
    # Dying during an export: the error gives its exit status; the next
    # export starts another worker.
    message = re.escape(
        "The TensorFlow subprocess exporting the probe failed (exit status 3)"
    )
    with pytest.raises(RuntimeError, match=f"^{message}"):
        probe("die")
    assert tensorflow_process._WORKER is None
    # A worker left idle exits by itself (after WORKER_IDLE_SECONDS); the
    # next export would start another, as after the death above.
    monkeypatch.setattr(tensorflow_process, "WORKER_IDLE_SECONDS", 1.0)
    second = probe()
    assert second["pid"] != first["pid"]
    assert tensorflow_process._WORKER[1].wait(timeout=30) == 0


def test_a_forked_process_starts_its_own_worker(probe, tmp_path):
    parent = probe()
    path = str(tmp_path / "child.json")

    def child():
        run_in_tensorflow(PROBE, [path, "ok"], "the probe")

    # Forked while another thread of this process holds the worker (its
    # lock taken): the child neither waits for that lock nor writes to
    # the parent's worker.
    fork = multiprocessing.get_context("fork")
    with tensorflow_process._LOCK:
        process = fork.Process(target=child)
        process.start()
    process.join(timeout=60)
    if process.exitcode is None:
        process.kill()
    assert process.exitcode == 0
    with open(path) as file:
        forked = json.load(file)
    assert forked["backend"] == "tensorflow"
    assert forked["pid"] not in (parent["pid"], os.getpid(), process.pid)
    # The parent's worker goes on; stopped (as at this process's exit),
    # it ends.
    assert probe() == parent
    worker = tensorflow_process._WORKER[1]
    tensorflow_process._stop()
    assert worker.poll() == 0
    assert tensorflow_process._WORKER is None
