"""Issue 48: ratios between cases that must run in different processes,
measured in alternating children.

kmodels' Seq2Seq train step on each Keras backend and the original
tf.keras code (Keras 2) cannot share a process. Dividing two medians
measured minutes apart, in different phases of a shared machine, gave
ratios the next run did not reproduce. `python -m benchmarks --pairs N`
runs, for each backend, N pairs of children back to back, the backend's
case then the reference (A B A B ...), and reports the median of the N
per-pair ratios with their range; the JSON keeps every pair.
"""

import statistics

from benchmarks import cases as cases_mod

# (case on a Keras backend, its reference case, the reference's backend):
# the reported figure is reference time / case time (a speed-up).
PAIRED = (("seq2seq_train", "seq2seq_train_original", cases_mod.TF_KERAS),)


def summary(pairs):
    """The figures of `pairs`, a list of `(reference_ms, case_ms)` measured
    side by side (either may be None for a failed child):
    `{"original_pairs": [[reference_ms, case_ms], ...], "original_speedup":
    median of reference / case over the complete pairs,
    "original_speedup_min", "original_speedup_max"}`; the three figures are
    None when no pair is complete."""
    ratios = [r / c for r, c in pairs if r and c]
    figures = {"original_pairs": [list(pair) for pair in pairs]}
    if not ratios:
        return dict(
            figures,
            original_speedup=None,
            original_speedup_min=None,
            original_speedup_max=None,
        )
    return dict(
        figures,
        original_speedup=statistics.median(ratios),
        original_speedup_min=min(ratios),
        original_speedup_max=max(ratios),
    )


def run(backends, pairs, run_case, paired=PAIRED):
    """Runs `pairs` alternated pairs of children per backend and paired
    case (`paired`, as `PAIRED`); `run_case(backend, case)` runs one child
    and returns its record (or None). Returns `{(case, backend):
    summary(...)}`."""
    out = {}
    for case, reference, reference_backend in paired:
        for backend in backends:
            measured = []
            for _ in range(pairs):
                mine = _ms(run_case(backend, case))
                theirs = _ms(run_case(reference_backend, reference))
                measured.append((theirs, mine))
            out[(case, backend)] = summary(measured)
    return out


def _ms(record):
    if record and record.get("status") == "ok":
        return record["median_ms"]
    return None
