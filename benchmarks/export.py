"""`TextTranslator.export` of the dates bundle, timed (issue 44).

On TensorFlow the SavedModel is written in the calling process; on JAX and
torch in kmodels' TensorFlow worker process (`kmodels.export`), which the
first export starts and the next ones reuse. The first export is timed
apart (`first_call_ms`: on JAX and torch it includes starting the worker,
which imports TensorFlow); the median is over the exports after it, each
into a new folder.
"""

import os
import shutil
import tempfile
import time

from benchmarks.eager import _dates_bundle
from benchmarks.timing import measure


def export_time(sizes, timing):
    """`bundle.export(folder)` of the dates bundle (`sizes["units"]`),
    `sizes["exports"]` times after the first; `timing` is not used (each
    export is seconds: the count is the size's)."""
    bundle = _dates_bundle(sizes)
    bundle.translate("Wednesday, March 3, 2021")  # builds the model
    root = tempfile.mkdtemp(prefix="kmodels-export-bench-")
    folders = (os.path.join(root, str(n)) for n in range(1 + sizes["exports"]))

    def step():
        bundle.export(next(folders))

    try:
        t0 = time.perf_counter()
        step()
        first_call_ms = (time.perf_counter() - t0) * 1e3
        count = sizes["exports"]
        stats = measure(
            step,
            warmup=0,
            min_steps=count,
            max_steps=count,
            max_seconds=float("inf"),
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return dict(stats, first_call_ms=first_call_ms)
