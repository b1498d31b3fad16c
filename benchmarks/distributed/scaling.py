"""What the scaling benchmark measures and how speed-ups are derived: the
workload sizes, the global batch of each scaling and device count, and the
rows of speed-up, efficiency and ceiling. Pure Python."""

from benchmarks import cases

# Tables list the backends alphabetically.
BACKENDS = tuple(sorted(cases.KERAS_BACKENDS))
DEVICE_COUNTS = (1, 2, 4)
SCALINGS = ("strong", "weak")
WORKLOADS = ("transformer", "seq2seq")

# Model sizes of `benchmarks.cases` (`batch` is the strong-scaling global
# batch), with a shorter sequence for the Transformer so the full run fits in
# about 6 minutes on 2 cores; `per_device_batch` is the weak-scaling batch of
# each device (a quarter of `batch`: on 4 devices both scalings meet).
FULL_SIZES = {
    "transformer": dict(
        cases.FULL_SIZES["transformer"], length=64, per_device_batch=8
    ),
    "seq2seq": dict(cases.FULL_SIZES["seq2seq"], per_device_batch=16),
}
# Tiny sizes for the smoke test; batches split over 4 devices.
QUICK_SIZES = {
    "transformer": dict(
        cases.QUICK_SIZES["transformer"], batch=4, per_device_batch=1
    ),
    "seq2seq": dict(cases.QUICK_SIZES["seq2seq"], batch=4, per_device_batch=1),
}
FULL_TIMING = {"warmup": 2, "min_steps": 5, "max_steps": 15, "max_seconds": 2}
QUICK_TIMING = {"warmup": 1, "min_steps": 2, "max_steps": 2, "max_seconds": 1}


def sizes_for(workload, quick):
    """The size dict of `workload` for a full or `--quick` run."""
    return dict((QUICK_SIZES if quick else FULL_SIZES)[workload])


def timing_for(quick):
    """The timing parameters (see `benchmarks.timing.measure`)."""
    return dict(QUICK_TIMING if quick else FULL_TIMING)


def global_batch(sizes, scaling, devices):
    """The global batch of one step: `sizes["batch"]` for strong scaling,
    `sizes["per_device_batch"] * devices` for weak scaling."""
    if scaling == "strong":
        return sizes["batch"]
    if scaling == "weak":
        return sizes["per_device_batch"] * devices
    raise ValueError(f"scaling must be 'strong' or 'weak'; got {scaling!r}.")


def batches_for(workloads, devices, quick):
    """`{workload: [global batch, ...]}` that a child with `devices` devices
    measures: the strong- and the weak-scaling global batch, once when they
    are equal (on 4 devices with the sizes here)."""
    out = {}
    for workload in workloads:
        sizes = sizes_for(workload, quick)
        out[workload] = sorted(
            {global_batch(sizes, s, devices) for s in SCALINGS}
        )
    return out


def scaling_rows(results, cpu_count, quick):
    """Derived rows, one per backend, workload, scaling and device count:
    the measurement of that configuration with `speedup` (examples/s over
    the 1-device examples/s of the same scaling), `efficiency` (speed-up /
    devices) and `ceiling` (min(devices, cpu_count): the most speed-up the
    cores allow). Values are None where a measurement is missing."""
    table = {
        (r["backend"], r["workload"], r["devices"], r["global_batch"]): r
        for r in results
        if r.get("workload")
    }
    keys = sorted(
        {
            (r["backend"], r["workload"], r["devices"])
            for r in results
            if r.get("workload")
        },
        key=lambda k: (BACKENDS.index(k[0]), WORKLOADS.index(k[1]), k[2]),
    )
    rows = []
    for scaling in SCALINGS:
        for backend, workload, devices in keys:
            sizes = sizes_for(workload, quick)
            batch = global_batch(sizes, scaling, devices)
            found = table.get((backend, workload, devices, batch))
            record = found if found and found["status"] == "ok" else None
            base = table.get(
                (backend, workload, 1, global_batch(sizes, scaling, 1))
            )
            speedup = None
            if record and base and base["status"] == "ok":
                speedup = record["examples_per_s"] / base["examples_per_s"]
            rows.append(
                {
                    "backend": backend,
                    "workload": workload,
                    "scaling": scaling,
                    "devices": devices,
                    "global_batch": batch,
                    "per_device_batch": batch // devices,
                    "status": found["status"] if found else "missing",
                    "median_ms": record and record["median_ms"],
                    "q1_ms": record and record["q1_ms"],
                    "q3_ms": record and record["q3_ms"],
                    "examples_per_s": record and record["examples_per_s"],
                    "first_step_s": record and record["first_step_s"],
                    "speedup": speedup,
                    "efficiency": None
                    if speedup is None
                    else speedup / devices,
                    "ceiling": min(devices, cpu_count),
                }
            )
    return rows
