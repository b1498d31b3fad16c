"""Eager calls of a `Translator` on concrete arrays, as in a notebook,
beside `predict_on_batch` on the same inputs (issue 17).

The first call (it builds the model and, where kmodels caches a compiled
call, traces it) is timed apart as `first_call_ms`; the calls after it are
the measurement. `rss_growth_mb` is the growth of the process' resident
memory over the timed calls, after three warm-up calls (a leak shows as
growth per call).
"""

import time

from benchmarks import data
from benchmarks.seq2seq import _translator
from benchmarks.timing import measure


def _resident_mb():
    """The process' resident memory (`VmRSS`) in MB, or None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _model_and_inputs(sizes):
    import keras

    model = _translator(sizes)
    (context, target_in), _ = data.seq2seq_batch(sizes)
    to_numpy = keras.ops.convert_to_numpy
    return model, (context, target_in), to_numpy


def eager_call(sizes, timing):
    """`translator((context, target_in))`, eagerly, on NumPy arrays."""
    model, inputs, to_numpy = _model_and_inputs(sizes)

    def step():
        return to_numpy(model(inputs))

    t0 = time.perf_counter()
    step()
    first_call_ms = (time.perf_counter() - t0) * 1e3
    # The first calls build and trace (kmodels compiles an eager call the
    # second time a signature is seen): memory is sampled after them.
    for _ in range(3):
        step()
    before = _resident_mb()
    stats = measure(step, **timing)
    after = _resident_mb()
    out = dict(stats, first_call_ms=first_call_ms)
    if before is not None and after is not None:
        out["rss_growth_mb"] = after - before
    return out


def predict_on_batch(sizes, timing):
    """`translator.predict_on_batch((context, target_in))` (the backend's
    compiled predict step) on the same inputs."""
    model, inputs, to_numpy = _model_and_inputs(sizes)

    def step():
        return to_numpy(model.predict_on_batch(inputs))

    t0 = time.perf_counter()
    step()
    first_call_ms = (time.perf_counter() - t0) * 1e3
    return dict(measure(step, **timing), first_call_ms=first_call_ms)
