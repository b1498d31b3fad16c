"""New shapes and new `max_length`s in a warm process (issue 44).

`new_shape`: `Translator.generate` of the dates bundle's (untrained)
translator, greedy, on random source ids. After two warm-up calls on a
batch of `batch` x `length` ids, the steady call is timed; then the first
call with one more row (a new batch size) and the first with 4 more
source positions (a new length), each against the steady call of its own
shape. On TensorFlow and JAX `generate` traces one loop per input shape,
so these ratios are the retrace's cost; torch runs the loop eagerly.

`max_length_memory`: the resident memory (`VmRSS`) kmodels keeps for 12
distinct `max_length` values of `generate`, after a warm-up call with
another value: TensorFlow never frees a traced graph, and kmodels keeps
its `decoding.MAX_LOOPS` most recent loops.
"""

from benchmarks.eager import _dates_bundle
from benchmarks.eager import _resident_mb
from benchmarks.timing import seconds
from benchmarks.timing import summarize


def _bundle_generate(sizes):
    """`(generate, tokens)`: a greedy `generate` of the dates translator
    that returns NumPy ids, and `tokens(batch, length)`, random source
    ids."""
    import keras
    import numpy as np

    model = _dates_bundle(sizes).translator
    rng = np.random.default_rng(0)

    def tokens(batch, length):
        return rng.integers(
            1, model.context_vocabulary_size, (batch, length)
        ).astype("int32")

    def generate(x, max_length=sizes["max_length"]):
        return keras.ops.convert_to_numpy(model.generate(x, max_length)[0])

    return generate, tokens


def new_shape(sizes, timing):
    """`sizes`: `units`, `batch`, `length`, `max_length`, `calls` (steady
    calls per shape); `timing` is not used. The timing keys (`median_ms`
    ...) are the steady call's; `new_batch_ms` / `new_length_ms` (first
    calls), `..._steady_ms` (their shapes' steady medians) and
    `new_batch_ratio` / `new_length_ratio` (first over own steady)."""
    generate, tokens = _bundle_generate(sizes)
    batch, length, calls = sizes["batch"], sizes["length"], sizes["calls"]
    base = tokens(batch, length)
    generate(base)
    generate(base)
    out = summarize([seconds(generate, base) for _ in range(calls)])
    for name, x in (
        ("batch", tokens(batch + 1, length)),
        ("length", tokens(batch, length + 4)),
    ):
        first = seconds(generate, x) * 1e3
        steady = summarize([seconds(generate, x) for _ in range(calls)])
        out[f"new_{name}_ms"] = first
        out[f"new_{name}_steady_ms"] = steady["median_ms"]
        out[f"new_{name}_ratio"] = first / steady["median_ms"]
    return out


def max_length_memory(sizes, timing):
    """`sizes`: `units`, `batch`, `length`, `max_length` (the warm-up's),
    `values` (distinct `max_length`s after it); `timing` is not used. The
    timing keys are the first calls' (one per value); `rss_growth_mb`:
    `VmRSS` after them minus before."""
    generate, tokens = _bundle_generate(sizes)
    x = tokens(sizes["batch"], sizes["length"])
    generate(x)
    generate(x)
    before = _resident_mb()
    start = sizes["max_length"] + 1
    times = [
        seconds(generate, x, max_length=m)
        for m in range(start, start + sizes["values"])
    ]
    after = _resident_mb()
    out = summarize(times)
    out["values"] = sizes["values"]
    if before is not None and after is not None:
        out["rss_growth_mb"] = after - before
    return out
