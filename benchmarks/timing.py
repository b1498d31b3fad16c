"""Step timing and its summary statistics (no Keras import here)."""

import cProfile
import io
import os
import pstats
import statistics
import time

# Set by the child for `--profile`: a folder and the file stem of the case
# being measured. When set, `measure` profiles a few extra steps.
PROFILE = {"dir": None, "stem": None}
PROFILE_STEPS = 3


def seconds(call, *args, **kwargs):
    """The wall time of `call(*args, **kwargs)`, in seconds."""
    t0 = time.perf_counter()
    call(*args, **kwargs)
    return time.perf_counter() - t0


def summarize(seconds):
    """Median and spread of a list of step times given in seconds.

    Returns a dict in milliseconds: `median_ms`, `q1_ms`, `q3_ms` (first and
    third quartiles, "inclusive" method: the quartiles of n values lie between
    the values themselves), `min_ms`, `max_ms` and `steps`.
    """
    if not seconds:
        raise ValueError("summarize() needs at least one step time; got none.")
    ms = sorted(s * 1e3 for s in seconds)
    if len(ms) == 1:
        q1 = q3 = ms[0]
    else:
        q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    return {
        "median_ms": statistics.median(ms),
        "q1_ms": q1,
        "q3_ms": q3,
        "min_ms": ms[0],
        "max_ms": ms[-1],
        "steps": len(ms),
    }


def measure(
    step,
    warmup=2,
    min_steps=5,
    max_steps=30,
    max_seconds=10.0,
    clock=time.perf_counter,
):
    """Times `step()` after `warmup` untimed calls (compilation excluded).

    `step` must block until its work is done (e.g. return a value converted
    to NumPy). Runs at least `min_steps` and at most `max_steps` timed calls,
    stopping early once `max_seconds` of timed calls have passed. Returns
    `summarize()` of the per-call times, plus `first_step_ms`: the wall time
    of the very first call (the first warm-up call, or the first timed one
    when `warmup` is 0), which includes tracing and compilation. `clock`
    returns seconds (a fake one in tests).
    """
    first = None
    for _ in range(warmup):
        t0 = clock()
        step()
        if first is None:
            first = clock() - t0
    times = []
    start = clock()
    while len(times) < max_steps:
        t0 = clock()
        step()
        times.append(clock() - t0)
        if len(times) >= min_steps and clock() - start > max_seconds:
            break
    if PROFILE["dir"]:
        profile(step)
    stats = summarize(times)
    stats["first_step_ms"] = (times[0] if first is None else first) * 1e3
    return stats


def measure_alternating(first, second, timing):
    """Times two steps taking turns, in the same process: pairs in
    alternating order (ABBA), so machine noise and warm-up hit both alike
    (the step that runs first in a pair, or the case timed first in a
    process, was measured a few % slower on JAX and torch, either way
    round). `timing` is `measure`'s keyword arguments. Returns
    `(first_stats, second_stats)`, `summarize()` of each step's timed
    calls (the pairs' warm-up calls excluded)."""
    times = ([], [])
    orders = (((0, first), (1, second)), ((1, second), (0, first)))

    def pair():
        for index, step in orders[len(times[0]) % 2]:
            t0 = time.perf_counter()
            step()
            times[index].append(time.perf_counter() - t0)

    pairs = measure(pair, **timing)
    timed = slice(timing["warmup"], timing["warmup"] + pairs["steps"])
    return summarize(times[0][timed]), summarize(times[1][timed])


def compile_ms(first_step_ms, median_ms):
    """The first call's extra cost over a steady step (tracing, compilation,
    first allocations): `first_step_ms - median_ms`, at least 0."""
    return max(first_step_ms - median_ms, 0.0)


def profile(step, steps=PROFILE_STEPS):
    """Writes where the time of `steps` more calls of `step` goes to
    `PROFILE["dir"]/<stem>.txt`: Python functions by cumulative time
    (cProfile) and, on torch, operators by self CPU time (torch profiler).
    Call after warm-up so compilation is not in the profile."""
    path = os.path.join(PROFILE["dir"], f"{PROFILE['stem']}.txt")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("cumulative")
    stats.print_stats(40)
    report = [
        f"# {steps} steps, cProfile by cumulative time\n",
        text.getvalue(),
    ]
    if os.environ.get("KERAS_BACKEND") == "torch" and not os.environ.get(
        "TF_USE_LEGACY_KERAS"
    ):
        import torch

        with torch.profiler.profile() as torch_profiler:
            for _ in range(steps):
                step()
        report += [
            f"\n# {steps} steps, torch profiler by self CPU time\n",
            torch_profiler.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=30
            ),
        ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(report))
