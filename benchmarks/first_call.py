"""First calls against steady calls, in fresh processes (issue 44).

What a user waits for in a new process: the first `translate` of the dates
bundle and the first `predict_on_batch` of its `Translator`, each against
the same call repeated. The case runs the measurement in two fresh
processes one after the other, sharing a new, empty cache folder (a new
`XDG_CACHE_HOME`, under which kmodels keeps JAX's persistent compilation
cache): the first process starts with the cache empty ("fresh"), the
second with what the first left ("warm cache"). kmodels turns that cache
on by default; TensorFlow and torch
keep no compiled program between processes, so their two processes
measure the same thing twice.

`python -m benchmarks.first_call UNITS CALLS` is the measuring process: it
prints one JSON line.
"""

import json
import os
import sys
import tempfile

from benchmarks.child import run_module
from benchmarks.timing import seconds
from benchmarks.timing import summarize

SENTENCE = "Wednesday, March 3, 2021"


def _measure(units, calls):
    """In this process: the first time and `calls` steady times (seconds)
    of `translate` and of `predict_on_batch`."""
    import keras

    from benchmarks.eager import _dates_bundle

    bundle = _dates_bundle({"units": units})
    context = keras.ops.convert_to_numpy(bundle.context_processor([SENTENCE]))
    target_in = context[:, :1] * 0 + bundle.target_processor.start_id
    model = bundle.translator

    def translate():
        return bundle.translate(SENTENCE)

    def predict():
        return model.predict_on_batch((context, target_in))

    out = {}
    for name, call in (("translate", translate), ("predict", predict)):
        out[f"{name}_first"] = seconds(call)
        out[f"{name}_steady"] = [seconds(call) for _ in range(calls)]
    return out


def _run_fresh(units, calls, cache):
    # kmodels' default, as a user gets it: its cache on, in its own folder
    # (here under a new XDG_CACHE_HOME), with no JAX setting of the user's.
    # The runner turns that cache off for its children.
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "KMODELS_COMPILATION_CACHE" and not k.startswith("JAX_")
    }
    env["XDG_CACHE_HOME"] = cache
    return run_module("benchmarks.first_call", units, calls, env=env)


def first_call(sizes, timing):
    """Two fresh processes (`sizes["units"]`, `sizes["calls"]` steady calls
    each), the second with the first one's compilation cache; `timing` is
    not used. The timing keys (`median_ms`...) are the fresh process'
    steady `translate` calls; `{translate,predict}_first_ms`,
    `..._steady_ms` (median), `..._warm_first_ms`, and the ratios
    `..._first_ratio` (fresh) and `..._warm_first_ratio` (first over
    steady, each in its own process)."""
    with tempfile.TemporaryDirectory(prefix="kmodels-first-call-") as cache:
        fresh = _run_fresh(sizes["units"], sizes["calls"], cache)
        warm = _run_fresh(sizes["units"], sizes["calls"], cache)
    out = summarize(fresh["translate_steady"])
    for name in ("translate", "predict"):
        first = fresh[f"{name}_first"] * 1e3
        steady = summarize(fresh[f"{name}_steady"])["median_ms"]
        warm_first = warm[f"{name}_first"] * 1e3
        warm_steady = summarize(warm[f"{name}_steady"])["median_ms"]
        out[f"{name}_first_ms"] = first
        out[f"{name}_steady_ms"] = steady
        out[f"{name}_warm_first_ms"] = warm_first
        out[f"{name}_first_ratio"] = first / steady
        out[f"{name}_warm_first_ratio"] = warm_first / warm_steady
    return out


if __name__ == "__main__":
    print(json.dumps(_measure(int(sys.argv[1]), int(sys.argv[2]))))
