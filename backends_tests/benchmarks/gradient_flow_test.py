"""The `gradient_flow_check` benchmark case (issue 32), `--quick`, on this
backend: it runs, checks once per timed `fit` call, and reports the ratio
it is registered for."""

import keras
import pytest

from benchmarks import cases
from benchmarks import child


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="the record's bookkeeping (checks counted, ratios) is the same "
    "code on every backend, and `tox -e bench` runs this case on all three "
    "in quick mode; torch runs it here fastest (7 s against 14-15 s)",
)
def test_quick_gradient_flow_check_on_this_backend():
    backend = keras.backend.backend()
    case = cases.CASES_BY_NAME["gradient_flow_check"]
    record = child._run_case(case, backend, quick=True)
    assert record["status"] == "ok", record.get("error")
    timing = cases.QUICK_TIMING
    sizes = cases.QUICK_SIZES[case.sizes]
    assert record["every_n_steps"] == sizes["every_n_steps"]
    # Each warm-up or timed `fit` of N steps ends on a multiple of N (one
    # check), plus the check before the very first step.
    assert record["checks"] == 1 + timing["warmup"] + timing["max_steps"]
    assert record["overhead_ratio"] == pytest.approx(
        record["median_ms"] / record["without_alternated_ms"], rel=1e-12
    )
    n = sizes["every_n_steps"]
    assert record["check_share"] == pytest.approx(
        record["check_ms"] / (n * record["without_alternated_ms"]), rel=1e-12
    )
