"""backends_tests/stall_watch.py: a test over the threshold is named in the
summary with its garbage-collector and interpreter-lock figures, and its
stacks are in the report; off, nothing is added."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

SLOW = textwrap.dedent(
    """
    import gc
    import time


    def test_quick():
        assert True


    def test_sleeps():
        time.sleep(1.2)


    def test_holds_the_lock_in_a_collection():
        start = time.perf_counter()
        sum(range(10**6))
        n = int(10**6 * 1.5 / (time.perf_counter() - start))

        class Slow:
            def __del__(self):
                # C code that keeps the interpreter lock for about 1.5 s
                # (as a collector pass does), run by the collector.
                sum(range(n))

        cycle = Slow()
        cycle.me = cycle
        del cycle
        gc.collect()
        time.sleep(0.5)
    """
)


def _run(tmp_path, env):
    (tmp_path / "slow_test.py").write_text(SLOW)
    env = dict(os.environ, PYTHONPATH=ROOT, **env)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["-p", "backends_tests.stall_watch", "--rootdir", str(tmp_path)]
        + [str(tmp_path / "slow_test.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.backend_independent(reason="a pytest plugin, no Keras")
def test_a_slow_test_is_named_with_its_collector_and_lock_figures(tmp_path):
    report = tmp_path / "stalls.txt"
    result = _run(
        tmp_path,
        {
            "KMODELS_TEST_STALL_SECONDS": "1",
            "KMODELS_TEST_STALL_REPORT": str(report),
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "tests over 1 s (KMODELS_TEST_STALL_SECONDS)" in out
    assert f"2 over; stacks: {report}" in out
    assert "::test_quick:" not in out
    sleeps = re.search(
        r"::test_sleeps: ([\d.]+) s; .* waited up to ([\d.]+) s", out
    )
    # A sleep releases the lock: the watcher runs on time (well under
    # the 1.5 s the other test holds it).
    assert float(sleeps.group(1)) >= 1.2
    assert float(sleeps.group(2)) < 0.5
    held = re.search(
        r"::test_holds_the_lock_in_a_collection: ([\d.]+) s; garbage "
        r"collector ([\d.]+) s in \d+ collections \(longest ([\d.]+) s, "
        r"generation 2\); watcher thread waited up to ([\d.]+) s",
        out,
    )
    assert held, out
    # The collector ran the ~1.5 s finalizer; the watcher (waking every
    # 0.25 s) waited for the lock (2.5x margin for a slower calibration).
    assert float(held.group(2)) >= 0.6
    assert float(held.group(3)) >= 0.6
    assert float(held.group(4)) >= 0.6
    stacks = report.read_text()
    # faulthandler wrote the sleeping test's stack after 1 s.
    assert "slow_test.py::test_sleeps" in stacks
    assert "line 11 in test_sleeps" in stacks


@pytest.mark.backend_independent(reason="a pytest plugin, no Keras")
def test_off_without_the_variable(tmp_path):
    result = _run(tmp_path, {"KMODELS_TEST_STALL_SECONDS": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "KMODELS_TEST_STALL_SECONDS" not in result.stdout
    bad = _run(tmp_path, {"KMODELS_TEST_STALL_SECONDS": "soon"})
    assert bad.returncode != 0
    expected = (
        "KMODELS_TEST_STALL_SECONDS must be a number of seconds; got 'soon'"
    )
    assert expected in bad.stdout + bad.stderr
