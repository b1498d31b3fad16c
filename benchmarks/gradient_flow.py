"""The cost of `GradientFlowCheck(every_n_steps=N)` inside `model.fit`: a
small Transformer classifier trained N steps per timed call, with and
without the callback, in alternation in one process."""

import numpy as np

from benchmarks import data
from benchmarks.child import require
from benchmarks.position import _kmodels_classifier
from benchmarks.timing import measure_alternating
from benchmarks.timing import seconds
from benchmarks.timing import summarize


def _fit_steps(sizes, callbacks):
    """A compiled model and a call that trains it `every_n_steps` steps
    with `fit` (one epoch), with `callbacks(x, y)` as its callbacks."""
    import keras

    keras.utils.set_random_seed(0)
    model = _kmodels_classifier(sizes)
    steps = sizes["every_n_steps"]
    rng = np.random.default_rng(0)
    x = data.padded_tokens(
        rng, sizes["batch"] * steps, sizes["length"], sizes["vocabulary"]
    )
    y = rng.integers(0, sizes["classes"], size=len(x)).astype("int32")
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    chosen = callbacks(x, y)

    def step():
        model.fit(
            x,
            y,
            batch_size=sizes["batch"],
            epochs=1,
            verbose=0,
            callbacks=chosen,
            shuffle=False,
        )

    return step, chosen


def monitor_overhead(sizes, timing):
    """Time per train step of `fit` with `GradientFlowCheck(sample,
    every_n_steps=N)` (one gradient check per timed call of N steps), and
    `without_alternated_ms`, the same model's time without the callback in
    the same pairs (`benchmarks.timing.measure_alternating`);
    `overhead_ratio` = with / without (the issue's target: at most 1.1 at
    N = 100). Times are per step: each call's time divided by N.

    On a busy machine the pairs' noise can exceed the callback's cost, so
    the check is also timed alone: `check_ms`, the median of
    `timing["min_steps"]` checks (after the timed pairs, at the last
    checked step), and `check_share` = check_ms / (N * without), the
    overhead that cost implies."""
    gradient_flow_check = require("kmodels.callbacks", "GradientFlowCheck")
    n = sizes["every_n_steps"]
    checked, (check,) = _fit_steps(
        sizes,
        lambda x, y: [gradient_flow_check((x[:8], y[:8]), every_n_steps=n)],
    )
    plain, _ = _fit_steps(sizes, lambda x, y: [])
    with_stats, without_stats = measure_alternating(checked, plain, timing)
    per_step = {
        key: value / n if key.endswith("_ms") else value
        for key, value in with_stats.items()
    }
    without_ms = without_stats["median_ms"] / n
    calls = len(check.history)
    last = next(reversed(check.history))
    check_stats = summarize(
        [seconds(lambda: check.monitor.check(last))
         for _ in range(timing["min_steps"])]
    )  # fmt: skip
    return dict(
        per_step,
        without_alternated_ms=without_ms,
        overhead_ratio=per_step["median_ms"] / without_ms,
        every_n_steps=n,
        checks=calls,
        check_ms=check_stats["median_ms"],
        check_share=check_stats["median_ms"] / (n * without_ms),
    )
