"""Issue 48: a ratio between cases that cannot share a process is the
median of per-pair ratios of alternated children."""

import pytest

from benchmarks import alternation
from benchmarks import cases
from benchmarks import report

pytestmark = pytest.mark.backend_independent(
    reason="the report's arithmetic and the order of the children"
)

# (original ms, kmodels ms) of three alternated pairs: ratios 1.5, 1.1, 2.0.
PAIRS = [(30.0, 20.0), (33.0, 30.0), (28.0, 14.0)]


def test_summary_is_the_median_of_per_pair_ratios():
    figures = alternation.summary(PAIRS + [(None, 10.0)])
    assert figures["original_speedup"] == 1.5
    assert (
        figures["original_speedup_min"],
        figures["original_speedup_max"],
    ) == (
        1.1,
        2.0,
    )
    assert figures["original_pairs"] == [list(p) for p in PAIRS] + [
        [None, 10.0]
    ]
    assert alternation.summary([(None, 1.0)])["original_speedup"] is None


def test_children_alternate_case_and_reference():
    calls = []

    def run_case(backend, case):
        calls.append((backend, case))
        return {"status": "ok", "median_ms": 10.0 if backend == "jax" else 20.0}

    out = alternation.run(["jax"], 2, run_case)
    assert (
        calls
        == [
            ("jax", "seq2seq_train"),
            (cases.TF_KERAS, "seq2seq_train_original"),
        ]
        * 2
    )
    assert out[("seq2seq_train", "jax")]["original_speedup"] == 2.0


def _speedup_row(targets, backend):
    (row,) = [
        t
        for t in targets
        if t["target"] == "Seq2Seq train: speed-up vs original"
        and t["backend"] == backend
    ]
    return row


def test_target_reads_the_alternated_pairs_before_the_medians():
    paired = dict(
        case="seq2seq_train",
        backend="jax",
        status="ok",
        median_ms=40.0,
        **alternation.summary(PAIRS),
    )
    alone = dict(
        case="seq2seq_train", backend="torch", status="ok", median_ms=20.0
    )
    original = dict(
        case="seq2seq_train_original",
        backend=cases.TF_KERAS,
        status="ok",
        median_ms=30.0,
    )
    targets = report.evaluate_targets([paired, alone, original])
    jax = _speedup_row(targets, "jax")
    # The pairs' median (1.5), not the medians' ratio (30 / 40 = 0.75).
    assert (jax["value"], jax["met"]) == (1.5, "yes")
    assert jax["note"] == "median of 3 alternated process pairs (1.10-2.00)"
    torch = _speedup_row(targets, "torch")
    assert (torch["value"], torch["note"]) == (
        1.5,
        "medians of two processes, not paired",
    )
    assert _speedup_row(targets, "tensorflow")["met"] == "n/a"
