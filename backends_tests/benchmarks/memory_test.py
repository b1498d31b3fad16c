"""Peak resident memory per case (`benchmarks.memory`)."""

import sys

import pytest

from benchmarks import memory

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads /proc (Linux)"
    ),
    pytest.mark.backend_independent(reason="the process's memory readings"),
]


def test_status_field_in_megabytes(tmp_path):
    path = tmp_path / "status"
    path.write_text("Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t 1024 kB\n")
    assert memory._status_mb("VmHWM", str(path)) == 200.0
    assert memory._status_mb("VmRSS", str(path)) == 1.0
    assert memory._status_mb("VmSwap", str(path)) is None
    assert memory._status_mb("VmHWM", str(tmp_path / "absent")) is None


def test_peak_is_reset_per_case():
    # 64 MB touched before the reset do not count; 64 MB touched after do.
    block = bytearray(64 * 1024 * 1024)
    del block
    scope, rss_mb = memory.start()
    if scope != "case":
        pytest.skip("this kernel refuses /proc/self/clear_refs")
    assert memory.peak_mb(scope) < rss_mb + 32
    block = bytearray(64 * 1024 * 1024)
    peak = memory.peak_mb(scope)
    del block
    assert peak >= rss_mb + 60  # 64 MB, less page-accounting slack


def test_without_reset_the_peak_is_the_process_lifetime(tmp_path):
    # An unwritable clear_refs: the reset fails and the peak falls back to
    # ru_maxrss, never below the current resident memory.
    assert memory.reset_peak(str(tmp_path / "no" / "clear_refs")) is False
    assert memory.peak_mb("process") >= memory._status_mb("VmRSS") - 1
