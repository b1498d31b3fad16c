"""torch on a busy machine (issue 44, item 5): kmodels' `Translator` trained
with `fit` while a CPU hog per core spins beside it, torch's default
intra-op threads against one thread, in alternation in one process."""

import contextlib
import os
import statistics
import subprocess
import sys
import time

from benchmarks import data
from benchmarks.child import require
from benchmarks.timing import summarize

# One busy loop per core, in its own process (not a thread of ours: the
# hog must compete for cores the way another user's job does).
HOG_CODE = "while True:\n    pass\n"


@contextlib.contextmanager
def cpu_hogs(count):
    """Runs `count` processes that each spin one core until the block
    ends; they are killed (by their own ids) on the way out."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG_CODE])
        for _ in range(count)
    ]
    try:
        time.sleep(0.5)  # let them reach their loops
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


def _dates_fit(sizes):
    """A compiled `Translator` at the dates demo's sizes and a call that
    trains it one epoch of `sizes["batches"]` batches with `fit`; the
    call returns its seconds."""
    import keras

    Translator = require("kmodels.seq2seq", "Translator")
    masked_loss = require("kmodels.seq2seq", "masked_loss")
    keras.utils.set_random_seed(0)
    model = Translator(
        sizes["vocabulary"],
        sizes["target_vocabulary"],
        sizes["units"],
    )
    batch = dict(sizes, batch=sizes["batch"] * sizes["batches"])
    (context, target_in), target_out = data.dates_batch(batch)
    model((context[:2], target_in[:2]))
    model.compile(optimizer="adam", loss=masked_loss)

    def one_epoch():
        start = time.perf_counter()
        model.fit(
            (context, target_in),
            target_out,
            batch_size=sizes["batch"],
            epochs=1,
            verbose=0,
            shuffle=False,
        )
        return time.perf_counter() - start

    return one_epoch


def _one_thread(call):
    """`call()` with `torch.set_num_threads(1)`, the user's fix; torch's
    previous count is put back afterwards."""
    import torch

    def run():
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return call()
        finally:
            torch.set_num_threads(before)

    return run


def torch_busy_threads(sizes, timing):
    """One `fit` epoch of the dates-sized `Translator` with a CPU hog per
    core (`cpu_hogs`), torch's default threads (whatever kmodels does by
    default) against `torch.set_num_threads(1)`, in pairs whose order
    swaps every pair (AB BA ...). `median_ms` and its spread are the
    default epoch's; `one_thread_ms` the one-thread median;
    `thread_ratio` the median of the per-pair ratios default / one
    thread (issue 44's target: at most 1.5), with `thread_ratio_min` /
    `_max` and every pair in `pairs`. `idle_ratio` is the same ratio on
    the machine without the hogs (one pair after the hogs stop), and
    `threads` torch's default count."""
    import torch

    default = _dates_fit(sizes)
    one = _one_thread(default)
    for _ in range(timing["warmup"]):
        default()
        one()
    cores = len(os.sched_getaffinity(0))
    pairs = []
    with cpu_hogs(cores):
        for i in range(sizes["pairs"]):
            if i % 2 == 0:
                a, b = default(), one()
            else:
                b, a = one(), default()
            pairs.append(
                {"default_ms": a * 1e3, "one_thread_ms": b * 1e3, "ratio": a / b}
            )
    idle_one = one()
    idle_default = default()
    ratios = [p["ratio"] for p in pairs]
    result = summarize([p["default_ms"] / 1e3 for p in pairs])
    result.update(
        one_thread_ms=statistics.median(p["one_thread_ms"] for p in pairs),
        thread_ratio=statistics.median(ratios),
        thread_ratio_min=min(ratios),
        thread_ratio_max=max(ratios),
        pairs=pairs,
        idle_ratio=idle_default / idle_one,
        hogs=cores,
        threads=torch.get_num_threads(),
        batches=sizes["batches"],
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
        flops=0,
    )
    return result
