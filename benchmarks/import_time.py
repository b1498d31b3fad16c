"""Import time of kmodels against Keras, in fresh processes (issue 44).

Each round starts one fresh interpreter per module (`keras`, `kmodels`,
`kmodels.seq2seq`) on the current backend, in an order that rotates from
round to round, and times the import statement alone (not the
interpreter's start). The ratios are ratios of medians over the rounds,
taken side by side on the same machine. Each process also reports whether
the import loaded TensorFlow or keras-hub: on JAX and torch, kmodels loads
them only when a sampler or a keras-hub layer is first used.

`python -m benchmarks.import_time MODULE` is the measuring process: it
prints one JSON line.
"""

import json
import statistics
import sys
import time

from benchmarks.child import run_module
from benchmarks.timing import summarize

MODULES = ("keras", "kmodels", "kmodels.seq2seq")


def import_time(sizes, timing):
    """`sizes["rounds"]` rounds of one fresh process per module of
    `MODULES`; `timing` is not used. The timing keys (`median_ms`...) are
    `import kmodels.seq2seq`'s; `keras_ms`, `kmodels_ms` (medians),
    `kmodels_ratio` and `seq2seq_ratio` (median over `import keras`'s
    median), and `seq2seq_loads_tensorflow` / `..._keras_hub` (in any
    round)."""
    seconds = {module: [] for module in MODULES}
    loads = {"tensorflow": False, "keras_hub": False}
    for r in range(sizes["rounds"]):
        order = MODULES[r % len(MODULES) :] + MODULES[: r % len(MODULES)]
        for module in order:
            found = run_module("benchmarks.import_time", module)
            seconds[module].append(found["seconds"])
            if module == "kmodels.seq2seq":
                for name in loads:
                    loads[name] = loads[name] or found[name]
    keras_s = statistics.median(seconds["keras"])
    kmodels_s = statistics.median(seconds["kmodels"])
    out = summarize(seconds["kmodels.seq2seq"])
    out["keras_ms"] = keras_s * 1e3
    out["kmodels_ms"] = kmodels_s * 1e3
    out["kmodels_ratio"] = kmodels_s / keras_s
    out["seq2seq_ratio"] = out["median_ms"] / out["keras_ms"]
    out["seq2seq_loads_tensorflow"] = loads["tensorflow"]
    out["seq2seq_loads_keras_hub"] = loads["keras_hub"]
    return out


def _measure(module):
    """In this process: the import of `module`, timed."""
    import importlib

    t0 = time.perf_counter()
    importlib.import_module(module)
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "tensorflow": "tensorflow" in sys.modules,
        "keras_hub": "keras_hub" in sys.modules,
    }


if __name__ == "__main__":
    print(json.dumps(_measure(sys.argv[1])))
