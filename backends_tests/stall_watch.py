"""Opt-in stall watch for the test runs: where a test that takes too long is.

Off unless `KMODELS_TEST_STALL_SECONDS` is set (a number of seconds); tox
passes it through. With it, each test that runs longer than that gets:

- the stacks of all threads every that many seconds (`faulthandler`, which
  runs in C and also writes while Python's interpreter lock is held), in
  the file `KMODELS_TEST_STALL_REPORT` names (default: a file in the
  temporary folder, named in the summary);
- a line in pytest's summary: the test, its seconds, the seconds Python's
  garbage collector ran during it (collections, the longest one and its
  generation), and the longest time a watcher thread that wakes every
  0.25 s waited to run (the interpreter lock held that long by one
  thread, or the process not scheduled).

Why: full TensorFlow runs of stop 56 (2026-12-06) stalled 21-107 s in
`reliability/input_contracts_test.py` in 6 of 8 runs (never when the file
ran alone). The summary line tells a collector pass (GC seconds), a held
interpreter lock (watcher delay) and a starved process (neither) apart:
there, one full collection, waiting on a `tf.data` iterator's destructor.
docs/architecture.md, "Tests: where the time goes".

    KMODELS_TEST_STALL_SECONDS=12 tox -e tensorflow

A diagnostic only, never on in CI: writing the stacks of threads that are
running is not safe in CPython, and one full JAX run with it at 5 s died of
a segmentation fault inside such a dump (2026-12-07; the run without it
passed).
"""

import faulthandler
import gc
import os
import tempfile
import threading
import time

import pytest

ENV = "KMODELS_TEST_STALL_SECONDS"
REPORT_ENV = "KMODELS_TEST_STALL_REPORT"
WAKE_SECONDS = 0.25


class StallWatch:
    def __init__(self, seconds, path):
        self.seconds = seconds
        self.path = path
        self.file = open(path, "w")  # noqa: SIM115 (open for the session)
        self.stalls = []
        self._gc_start = None
        self._reset()
        gc.callbacks.append(self._on_gc)
        threading.Thread(
            target=self._watch, name="kmodels-stall-watch", daemon=True
        ).start()

    def _reset(self):
        self.gc_seconds = 0.0
        self.gc_count = 0
        self.gc_longest = (0.0, None)
        self.longest_wait = 0.0

    def _on_gc(self, phase, info):
        now = time.perf_counter()
        if phase == "start":
            self._gc_start = now
        elif self._gc_start is not None:
            took = now - self._gc_start
            self.gc_seconds += took
            self.gc_count += 1
            if took > self.gc_longest[0]:
                self.gc_longest = (took, info["generation"])
            self._gc_start = None

    def _watch(self):
        while True:
            before = time.perf_counter()
            time.sleep(WAKE_SECONDS)
            waited = time.perf_counter() - before - WAKE_SECONDS
            self.longest_wait = max(self.longest_wait, waited)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._reset()
        self.file.write(f"\n#### {time.strftime('%H:%M:%S')} {item.nodeid}\n")
        self.file.flush()
        faulthandler.dump_traceback_later(
            self.seconds, repeat=True, file=self.file
        )
        start = time.perf_counter()
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
        took = time.perf_counter() - start
        if took > self.seconds:
            longest, generation = self.gc_longest
            self.stalls.append(
                f"{item.nodeid}: {took:.1f} s; garbage collector "
                f"{self.gc_seconds:.1f} s in {self.gc_count} collections "
                f"(longest {longest:.1f} s, generation {generation}); "
                f"watcher thread waited up to {self.longest_wait:.1f} s"
            )

    def pytest_terminal_summary(self, terminalreporter):
        reporter = terminalreporter
        reporter.section(f"tests over {self.seconds:g} s ({ENV})")
        for line in self.stalls:
            reporter.line(line)
        reporter.line(f"{len(self.stalls)} over; stacks: {self.path}")


def register(config):
    """Registers the watch when `KMODELS_TEST_STALL_SECONDS` is set."""
    value = os.environ.get(ENV)
    if not value or config.pluginmanager.has_plugin("kmodels-stall-watch"):
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise pytest.UsageError(
            f"{ENV} must be a number of seconds; got {value!r}"
        ) from None
    if seconds <= 0:
        raise pytest.UsageError(f"{ENV} must be > 0; got {value!r}")
    path = os.environ.get(REPORT_ENV) or os.path.join(
        tempfile.gettempdir(), f"kmodels-stalls-{os.getpid()}.txt"
    )
    watch = StallWatch(seconds, path)
    config.pluginmanager.register(watch, "kmodels-stall-watch")
    return watch


def pytest_configure(config):
    register(config)
