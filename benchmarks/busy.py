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
        subprocess.Popen([sys.executable, "-c", HOG_CODE]) for _ in range(count)
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


def _not_adapted(call):
    """`call()` with kmodels' choice of threads from the free cores off
    (`kmodels.seq2seq.adapt_threads_to_load(False)`): torch's own default
    count, as before issue 44."""
    adapt = require("kmodels.seq2seq", "adapt_threads_to_load")

    def run():
        previous = adapt(False)
        try:
            return call()
        finally:
            adapt(previous)

    return run


ARMS = ("default", "one_thread", "torch_default")


def torch_busy_threads(sizes, timing):
    """One `fit` epoch of the dates-sized `Translator` with a CPU hog per
    core (`cpu_hogs`), in rounds of three arms whose order rotates every
    round: kmodels' default (`default`), `torch.set_num_threads(1)`
    (`one_thread`, the user's fix) and torch's own default count with
    kmodels' choice of threads off (`torch_default`, the code before
    issue 44). `median_ms` and its spread are the default arm's epochs;
    `thread_ratio` the median of the per-round ratios default / one
    thread (issue 44's target: at most 1.5), with `thread_ratio_min` /
    `_max`; `torch_default_ratio` the same for torch's default / one
    thread; every round in `rounds`. `no_hog_ratio` is default / one
    thread in one round after the hogs stop (the machine's other load
    remains), `threads` torch's count."""
    import torch

    default = _dates_fit(sizes)
    arms = {
        "default": default,
        "one_thread": _one_thread(default),
        "torch_default": _not_adapted(default),
    }
    for _ in range(timing["warmup"]):
        for name in ARMS:
            arms[name]()
    cores = len(os.sched_getaffinity(0))
    rounds = []
    with cpu_hogs(cores):
        for i in range(sizes["pairs"]):
            order = ARMS[i % 3 :] + ARMS[: i % 3]
            seconds = {name: arms[name]() for name in order}
            one = seconds["one_thread"]
            rounds.append(
                {f"{name}_ms": seconds[name] * 1e3 for name in ARMS}
                | {
                    "order": list(order),
                    "ratio": seconds["default"] / one,
                    "torch_default_ratio": seconds["torch_default"] / one,
                }
            )
    no_hog_one = arms["one_thread"]()
    no_hog_default = default()
    ratios = [r["ratio"] for r in rounds]
    untuned = [r["torch_default_ratio"] for r in rounds]
    result = summarize([r["default_ms"] / 1e3 for r in rounds])
    result.update(
        one_thread_ms=statistics.median(r["one_thread_ms"] for r in rounds),
        torch_default_ms=statistics.median(
            r["torch_default_ms"] for r in rounds
        ),
        thread_ratio=statistics.median(ratios),
        thread_ratio_min=min(ratios),
        thread_ratio_max=max(ratios),
        torch_default_ratio=statistics.median(untuned),
        torch_default_ratio_min=min(untuned),
        torch_default_ratio_max=max(untuned),
        rounds=rounds,
        no_hog_ratio=no_hog_default / no_hog_one,
        hogs=cores,
        threads=torch.get_num_threads(),
        batches=sizes["batches"],
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
        flops=0,
    )
    return result
