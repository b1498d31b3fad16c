"""Child process of the scaling benchmark: one backend, one device count.

`python -m benchmarks.distributed.child --backend jax --devices 4
--workloads transformer,seq2seq --batches '{"transformer": [4, 16]}'
[--quick]` splits the CPU into `--devices` virtual devices before the
backend starts (they are fixed for the life of a process), builds each
workload under the backend's data-parallel engine (`engines.engine`) and
prints one line per (workload, global batch), `BENCH_RESULT {json}`, as
`benchmarks.child` does. A failure is reported as a `status: "error"`
record and the child goes on.
"""

import argparse
import gc
import json
import os
import sys
import time
import traceback

from benchmarks.child import PREFIX
from benchmarks.child import require
from benchmarks.distributed.engines import ENGINES
from benchmarks.distributed.engines import engine
from benchmarks.distributed.engines import unsupported_record
from benchmarks.distributed.scaling import sizes_for
from benchmarks.distributed.scaling import timing_for
from benchmarks.timing import measure


def _transformer(sizes, global_batch):
    """`kmodels.models.transformer_encoder` as in the backend benchmark
    (`benchmarks.position`), its padded ids and labels, and its loss."""
    import keras
    import numpy as np

    from benchmarks import data
    from benchmarks import position

    keras.utils.set_random_seed(0)
    model = position._kmodels_classifier(sizes)
    rng = np.random.default_rng(0)
    ids = data.padded_tokens(
        rng, global_batch, sizes["length"], sizes["vocabulary"]
    )
    labels = rng.integers(0, sizes["classes"], size=global_batch)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, ids, labels.astype("int32"), loss


def _translator(sizes, global_batch):
    """`kmodels.seq2seq.Translator` as in `benchmarks.seq2seq`, one
    right-padded batch and `masked_loss`."""
    from benchmarks import data
    from benchmarks import seq2seq

    masked_loss = require("kmodels.seq2seq", "masked_loss")
    model = seq2seq._translator(sizes)
    (context, target_in), target_out = data.seq2seq_batch(
        dict(sizes, batch=global_batch)
    )
    # Built here, under the engine's scope, so its variables are created
    # (replicated) before the first step.
    model((context[:1], target_in[:1]))
    return model, (context, target_in), target_out, masked_loss


BUILDERS = {"transformer": _transformer, "seq2seq": _translator}


def measure_workload(backend, device_count, workload, sizes, global_batch,
                     timing):  # fmt: skip
    """Times training steps of `workload` on `device_count` devices with
    `global_batch` examples per step (split evenly across the devices).

    Returns the record: `median_ms`, quartiles, `steps` (see
    `benchmarks.timing.summarize`), `examples_per_s` at the median and
    `first_step_s` (the first step, compilation included, timed alone
    and before the `timing["warmup"]` untimed steps)."""

    if global_batch % device_count:
        raise ValueError(
            f"the global batch must split evenly over the devices; got "
            f"batch {global_batch} for {device_count} devices."
        )
    scope, train_step = engine(backend, device_count)
    with scope:
        model, x, y, loss = BUILDERS[workload](sizes, global_batch)
        model.compile(optimizer="adam", loss=loss)
        step = train_step(model, x, y)
        t0 = time.perf_counter()
        step()
        first_step_s = time.perf_counter() - t0
        # At least one more untimed step: on one JAX device the second
        # step compiles again (the variables come back from the first with
        # the mesh's sharding).
        stats = measure(step, **dict(timing, warmup=max(1, timing["warmup"])))
    return dict(
        stats,
        examples_per_s=global_batch / (stats["median_ms"] / 1e3),
        first_step_s=first_step_s,
    )


def run(backend, device_count, workloads, batches, quick, emit):
    """Measures every `(workload, global batch)` and calls `emit(record)` for
    each as it ends (a failure gives a `status: "error"` record)."""
    if backend not in ENGINES:
        emit(unsupported_record(backend))
        return
    for workload in workloads:
        sizes = sizes_for(workload, quick)
        for global_batch in batches[workload]:
            record = {
                "backend": backend,
                "engine": ENGINES[backend],
                "workload": workload,
                "devices": device_count,
                "global_batch": global_batch,
                "per_device_batch": global_batch // device_count,
                "sizes": sizes,
            }
            t0 = time.perf_counter()
            try:
                out = measure_workload(
                    backend,
                    device_count,
                    workload,
                    sizes,
                    global_batch,
                    timing_for(quick),
                )
                record.update(status="ok", **out)
            except Exception as error:  # reported, never fatal for the run
                record.update(
                    status="error",
                    error=f"{type(error).__name__}: {error}"[:500],
                    traceback=traceback.format_exc()[-2000:],
                )
            record["wall_s"] = time.perf_counter() - t0
            import keras

            keras.utils.clear_session()
            gc.collect()
            emit(record)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.distributed.child"
    )
    parser.add_argument("--backend", required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--workloads", required=True)
    parser.add_argument(
        "--batches",
        required=True,
        help="JSON {workload: [global batch, ...]}",
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if os.environ.get("KERAS_BACKEND") != args.backend:
        raise SystemExit(
            f"KERAS_BACKEND must be {args.backend!r} before Keras is "
            f"imported; got {os.environ.get('KERAS_BACKEND')!r}."
        )
    if args.backend in ENGINES:
        # Before Keras (and the backend) start: the device count is fixed
        # at start-up.
        from kmodels.distributed import virtual_cpu_devices

        virtual_cpu_devices(args.devices, backend=args.backend)

    def emit(record):
        sys.stdout.write(PREFIX + json.dumps(record) + "\n")
        sys.stdout.flush()

    run(
        args.backend,
        args.devices,
        args.workloads.split(","),
        json.loads(args.batches),
        args.quick,
        emit,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
