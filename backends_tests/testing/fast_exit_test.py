"""backends_tests/fast_exit.py: the run ends with pytest's exit status and
its full report, the `atexit` handlers run, and the interpreter's teardown
(here: a module global's `__del__`) is skipped unless
`KMODELS_TEST_FULL_EXIT=1`."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

CONFTEST = textwrap.dedent(
    """
    from backends_tests import fast_exit


    def pytest_configure(config):
        fast_exit.register(config)
    """
)

TESTS = textwrap.dedent(
    """
    import atexit
    import os

    OUT = os.environ["FAST_EXIT_OUT"]


    class _Torn:
        # Run when the interpreter clears the modules; builtins may be
        # gone by then, hence the defaults.
        def __del__(self, _open=open, _path=os.path.join(OUT, "teardown")):
            _open(_path, "w").close()


    KEPT = _Torn()


    def test_passes():
        atexit.register(
            lambda: open(os.path.join(OUT, "atexit"), "w").close()
        )


    def test_fails():
        assert 1 == 2
    """
)


def _run(tmp_path, *args, **env):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "some_test.py").write_text(TESTS)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    base = dict(os.environ, PYTHONPATH=ROOT, FAST_EXIT_OUT=str(out))
    base.pop("PYTEST_ADDOPTS", None)
    base.pop("KMODELS_TEST_FULL_EXIT", None)
    env = dict(base, **env)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp_path), str(tmp_path / "some_test.py")]
        + list(args),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, sorted(os.listdir(out))


@pytest.mark.backend_independent(reason="a pytest plugin, no Keras")
@pytest.mark.parametrize("full", [False, True])
def test_status_report_and_atexit_kept_teardown_skipped(tmp_path, full):
    extra = {"KMODELS_TEST_FULL_EXIT": "1"} if full else {}
    done, written = _run(tmp_path, **extra)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert written == (["atexit", "teardown"] if full else ["atexit"])


@pytest.mark.backend_independent(reason="a pytest plugin, no Keras")
def test_a_usage_error_exits_as_pytest_says(tmp_path):
    done, written = _run(tmp_path, "--no-such-option")
    assert done.returncode == 4, done.stdout + done.stderr
    assert written == []
