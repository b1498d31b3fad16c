"""Ends a test run without the interpreter's own teardown.

Once pytest has reported and unconfigured, the process still tears Python
down: modules, then every object the tests left. With TensorFlow that is
the C++ side of every graph and function the tests traced, and it is slow:
10.2 s after a 164 s TensorFlow run of `backends_tests/seq2seq`
(2026-12-07, the 2-core machine); no Python frame runs during it, and the
`atexit` handlers registered by then took 0.01 s. It is paid by every
pytest process of the matrix (three backends, three `distributed` runs).

`register(config)` adds a plugin whose last `pytest_unconfigure` flushes
the output, runs the `atexit` handlers, and ends the process with
`os._exit(<pytest's exit status>)`. Only after a session that finished (a
usage error exits as pytest says). `KMODELS_TEST_FULL_EXIT=1` keeps the
ordinary exit, for a crash that only the teardown shows.
"""

import atexit
import os
import sys

import pytest

ENV = "KMODELS_TEST_FULL_EXIT"


class _FastExit:
    def __init__(self):
        self.session = None

    def pytest_sessionfinish(self, session):
        self.session = session

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config):
        if self.session is None:
            return
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        os._exit(int(self.session.exitstatus))


def register(config):
    """Adds the plugin to `config` unless `$KMODELS_TEST_FULL_EXIT` is 1."""
    if os.environ.get(ENV) != "1":
        config.pluginmanager.register(_FastExit(), "kmodels_fast_exit")
