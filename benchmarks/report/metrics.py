"""Derived metrics of the raw result records: GFLOP/s, tokens and keys per
second, compile time, and the machine's measured matmul peak."""

from benchmarks.timing import compile_ms


def derive(record):
    """Adds `gflops` (achieved GFLOP/s at the median), for generation
    `tokens_per_s`, and where the record has a matmul floor (the Seq2Seq
    train step) `matmul_floor_ratio`, median step / floor, to an "ok"
    record; returns a new dict."""
    record = dict(record)
    if record.get("status") != "ok":
        return record
    seconds = record["median_ms"] / 1e3
    if record.get("flops"):
        record["gflops"] = record["flops"] / seconds / 1e9
    if record.get("tokens"):
        record["tokens_per_s"] = record["tokens"] / seconds
    if record.get("keys"):
        record["keys_per_s"] = record["keys"] / seconds
    if record.get("matmul_floor_ms"):
        record["matmul_floor_ratio"] = (
            record["median_ms"] / record["matmul_floor_ms"]
        )
    first = first_call_ms(record)
    if first is not None:
        record["compile_ms"] = compile_ms(first, record["median_ms"])
    return record


def first_call_ms(record):
    """The wall time of the case's first call, or None: `first_call_ms`
    where the case times it apart (the eager cases), else the first call
    `benchmarks.timing.measure` made (`first_step_ms`)."""
    first = record.get("first_call_ms")
    return record.get("first_step_ms") if first is None else first


def index(results):
    """`{(case, backend): record}` of the records."""
    return {(r["case"], r["backend"]): r for r in results}


def peak_gflops(results):
    """The machine's limit: the best float32 matmul GFLOP/s measured in this
    run (NumPy or any backend), or None."""
    values = [
        r["gflops"]
        for r in results
        if r["case"].startswith("matmul") and r.get("gflops")
    ]
    return max(values) if values else None
