"""Scaling benchmark: data-parallel training vs device count.

`python -m benchmarks.distributed [--quick] [--out DIR]` trains the
Transformer encoder classifier and the Translator on 1, 2 and 4 virtual CPU
devices with each backend's data-parallel engine (`keras.distribution.
DataParallel` on JAX, `tf.distribute.MirroredStrategy` on TensorFlow; torch
has none), one fresh subprocess per backend and device count, and reports
median ms/step, examples/s, speed-up over 1 device and efficiency, for the
same global batch (strong scaling) and the same per-device batch (weak
scaling). Prints the table and writes `<out>/distributed-<date>.json` and
`<out>/distributed-<date>.md` (the table as Markdown, for
`docs/distributed.md`).
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks import cases
from benchmarks import report
from benchmarks import runner
from benchmarks.child import PREFIX
from benchmarks.distributed_child import ENGINES
from benchmarks.distributed_child import WORKLOADS
from benchmarks.distributed_child import unsupported_record

SCHEMA_VERSION = 1
BACKENDS = ("jax", "tensorflow", "torch")
DEVICE_COUNTS = (1, 2, 4)
SCALINGS = ("strong", "weak")
WORKLOAD_NAMES = {
    "transformer": "Transformer encoder",
    "seq2seq": "Translator",
}

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

NOTE = (
    "What virtual devices can show: the {devices} virtual CPU devices are "
    "slices of the same {cores} CPU core(s). Each device holds its own copy "
    "of the variables and its own shard of the batch, and the gradients are "
    "all-reduced between them for real, so the run proves that data "
    "parallelism works and measures what it costs (sharding the batch, "
    "replicated updates, the all-reduce). It cannot show a real speed-up: "
    "the compute comes from the same cores, and one device already spreads "
    "its larger matrix products over all of them, so for compute-bound "
    "steps the speed-up is bounded by the core count ({cores} here, the "
    "`ceiling` column) and is about 1 where one device keeps every core "
    "busy. A speed-up below 1 is the overhead of going data parallel on one "
    "machine. Real speed-ups need real devices (several GPUs or TPUs, or "
    "several hosts)."
)
TORCH_NOTE = "torch: no row. " + unsupported_record("torch")["error"]


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


def _finite_positive(value):
    return (
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    )


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


def _rate(value):
    """Examples/s: whole numbers from 100 up, 3 significant digits below."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


ABOVE_CEILING = (
    "\\* above the ceiling: the 1-device step is not compute-bound (tiny "
    "sizes: per-step overhead) or the machine was busy; not a real speed-up."
)


def _above(row):
    """Whether the speed-up exceeds what the cores allow (by over 5%, more
    than timing noise on an idle machine)."""
    return row["speedup"] is not None and row["speedup"] > 1.05 * row["ceiling"]


def _cells(row):
    if row["status"] != "ok":
        return [row["status"]] + ["-"] * 5
    ms = report._num
    return [
        f"{ms(row['median_ms'])} ({ms(row['q1_ms'])}-{ms(row['q3_ms'])})",
        _rate(row["examples_per_s"]),
        report.format_value(row["speedup"]) + ("*" if _above(row) else ""),
        "-" if row["efficiency"] is None else f"{row['efficiency']:.0%}",
        str(row["ceiling"]),
        f"{row['first_step_s']:.1f}",
    ]


HEADERS = (
    "backend",
    "workload",
    "scaling",
    "devices",
    "global batch",
    "batch/device",
    "ms/step median (q1-q3)",
    "examples/s",
    "speed-up",
    "efficiency",
    "ceiling",
    "first step s",
)


def table_rows(doc):
    """The table as rows of strings, in `HEADERS` order."""
    return [
        [
            row["backend"],
            WORKLOAD_NAMES[row["workload"]],
            row["scaling"],
            str(row["devices"]),
            str(row["global_batch"]),
            str(row["per_device_batch"]),
            *_cells(row),
        ]
        for row in doc["scaling"]
    ]


def _note(doc):
    return NOTE.format(
        devices=max(doc["device_counts"]), cores=doc["machine"]["cpu_count"]
    )


def markdown(doc):
    """The results as a Markdown section for `docs/distributed.md`: run
    facts, the table, the torch line and the virtual-devices note."""
    engines = ", ".join(f"{b}: `{e}`" for b, e in ENGINES.items())
    lines = [
        f"Run of {doc['created']} ({'quick' if doc['quick'] else 'full'} "
        f"sizes), command `{doc['command']}`; "
        f"{doc['machine']['cpu_count']} CPU cores, device counts "
        f"{', '.join(map(str, doc['device_counts']))}; {engines}; "
        + ", ".join(f"{k} {v}" for k, v in doc["versions"].items())
        + ".",
        "",
        "Strong scaling: same global batch on every device count (ideal: "
        "examples/s grows with the devices). Weak scaling: same batch per "
        "device (ideal: ms/step stays flat). Speed-up: examples/s over the "
        "1-device examples/s of the same scaling; efficiency: speed-up / "
        "devices; ceiling: the speed-up the cores allow at most, min(devices, "
        "cores); first step: the first step timed alone, compilation "
        "included.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(doc)]
    if any(_above(row) for row in doc["scaling"]):
        lines += ["", ABOVE_CEILING]
    lines += ["", TORCH_NOTE, "", _note(doc)]
    return "\n".join(lines) + "\n"


def rich_table(doc):
    """The results as a `rich.table.Table`."""
    from rich.table import Table

    table = Table(
        title="Data-parallel scaling on virtual CPU devices "
        f"({doc['machine']['cpu_count']} cores)"
    )
    for header in HEADERS:
        table.add_column(header)
    previous = None
    for row, cells in zip(doc["scaling"], table_rows(doc)):
        key = (row["scaling"], row["backend"], row["workload"])
        if previous is not None and key != previous:
            table.add_section()
        previous = key
        table.add_row(*cells)
    return table


def validate(doc):
    """Raises ValueError if `doc` does not follow this benchmark's schema:
    its keys, and for every "ok" measurement positive, finite timings."""
    for key in ("schema_version", "kind", "created", "quick", "command",
                "machine", "versions", "device_counts", "note", "results",
                "scaling"):  # fmt: skip
        if key not in doc:
            raise ValueError(f"distributed results JSON misses key {key!r}")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {SCHEMA_VERSION} expected; got "
            f"{doc['schema_version']!r}"
        )
    for record in doc["results"]:
        if record.get("status") not in ("ok", "n/a", "error"):
            raise ValueError(f"unknown status {record.get('status')!r}")
        if record["status"] != "ok":
            continue
        for key in ("median_ms", "q1_ms", "q3_ms", "examples_per_s",
                    "first_step_s"):  # fmt: skip
            if not _finite_positive(record.get(key)):
                raise ValueError(
                    f"{record['backend']} {record['workload']} on "
                    f"{record['devices']} devices: {key} must be a positive "
                    f"finite number; got {record.get(key)!r}"
                )


def document(results, quick, device_counts, workloads, command, wall_s):
    """The JSON document: run facts (`machine.cpu_count`, the device
    counts, sizes, timing, versions), the raw `results` (one record per
    backend, workload, device count and global batch, or the backend's
    "n/a" record), the derived `scaling` rows and the note on what virtual
    devices can show."""
    cpu_count = os.cpu_count()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "distributed",
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "quick": quick,
        "command": command,
        "wall_s": round(wall_s, 1),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": cpu_count,
            "python": platform.python_version(),
        },
        "versions": runner._versions(),
        "device_counts": list(device_counts),
        "engines": dict(ENGINES),
        "unsupported": {"torch": unsupported_record("torch")["error"]},
        "sizes": {w: sizes_for(w, quick) for w in workloads},
        "timing": timing_for(quick),
        "results": list(results),
        "scaling": scaling_rows(results, cpu_count, quick),
    }
    doc["note"] = _note(doc)
    return doc


def write(doc, out_dir):
    """Validates `doc` and writes `<out_dir>/distributed-<date>.json` and
    `.md` (see `markdown`); returns the path without the extension."""
    validate(doc)
    stem = os.path.join(out_dir, f"distributed-{report.today()}")
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(doc))
    return stem


def run_child(backend, devices, workloads, quick, timeout, on_result):
    """Runs one child (`benchmarks.distributed_child`) with `devices`
    virtual devices; calls `on_result(record)` for every measurement. A
    crash or timeout gives one "error" record for the whole child."""
    batches = batches_for(workloads, devices, quick)
    command = [
        sys.executable, "-m", "benchmarks.distributed_child",
        "--backend", backend, "--devices", str(devices),
        "--workloads", ",".join(workloads), "--batches", json.dumps(batches),
    ]  # fmt: skip
    if quick:
        command.append("--quick")
    expected = sum(len(b) for b in batches.values())
    if backend not in ENGINES:
        expected = 1  # the "n/a" record
    seen = 0
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command,
            cwd=runner.ROOT,
            env=runner.child_env(backend),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            for line in process.stdout:
                if line.startswith(PREFIX):
                    seen += 1
                    on_result(json.loads(line[len(PREFIX) :]))
            process.wait()
        finally:
            timer.cancel()
        stderr.seek(0)
        tail = stderr.read()[-1500:]
    if seen < expected:
        why = f"child exited with {process.returncode}"
        if process.returncode in (-9, 137):
            why += f" (killed after the {timeout:.0f} s timeout?)"
        on_result(
            {
                "backend": backend,
                "workload": None,
                "devices": devices,
                "status": "error",
                "error": f"{why} after {seen} of {expected} results: {tail}",
            }
        )


def _split(text, allowed, option):
    values = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise SystemExit(
            f"{option}: expected a comma-separated subset of {list(allowed)}; "
            f"got {text!r}"
        )
    return values


def _device_counts(text):
    try:
        counts = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise SystemExit(
            f"--devices: expected comma-separated counts >= 1, e.g. 1,2,4; "
            f"got {text!r}"
        )
    return counts


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.distributed",
        description="Data-parallel training throughput vs virtual CPU device "
        "count (JAX DataParallel, TensorFlow MirroredStrategy).",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, 2 timed steps: a smoke test, not a measurement "
        "(writes to a temporary folder unless --out is given)",
    )
    parser.add_argument(
        "--out", help="folder for distributed-<date>.json/.md (default: "
        "benchmarks/results; a temporary folder with --quick)"
    )  # fmt: skip
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help=f"comma-separated subset of {','.join(BACKENDS)}",
    )
    parser.add_argument(
        "--devices",
        default=",".join(map(str, DEVICE_COUNTS)),
        help="comma-separated device counts (default 1,2,4; 1 is the "
        "baseline of the speed-ups)",
    )
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated subset of {','.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per subprocess (default 600, 300 with --quick)",
    )
    return parser.parse_args(argv)


def main(argv=None):
    from rich.console import Console

    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 160))
    backends = _split(args.backends, BACKENDS, "--backends")
    workloads = _split(args.workloads, WORKLOADS, "--workloads")
    devices = _device_counts(args.devices)
    installed = runner.installed_backends()
    timeout = args.timeout or (300.0 if args.quick else 600.0)
    out_dir = args.out or (
        tempfile.mkdtemp(prefix="kmodels-dist-") if args.quick
        else runner.RESULTS_DIR
    )  # fmt: skip
    os.makedirs(out_dir, exist_ok=True)

    results = []

    def on_result(record):
        results.append(record)
        if record["status"] == "error":
            console.print(
                f"[red]{record['backend']} {record.get('workload')} on "
                f"{record.get('devices')} devices: {record['error'][:300]}[/]"
            )
        elif record["status"] == "ok":
            console.print(
                f"{record['backend']} {record['workload']} "
                f"devices={record['devices']} batch={record['global_batch']}:"
                f" {report._num(record['median_ms'])} ms/step"
            )

    started = time.perf_counter()
    for backend in backends:
        # Checked first: a backend without an engine gets its "n/a" row
        # whether or not it is installed here.
        if backend not in ENGINES:
            on_result(unsupported_record(backend))
            continue
        if backend not in installed:
            console.print(f"[yellow]{backend} not installed, skipped[/]")
            continue
        for count in devices:
            run_child(backend, count, workloads, args.quick, timeout, on_result)

    doc = document(
        results,
        quick=args.quick,
        device_counts=devices,
        workloads=workloads,
        command=" ".join(
            ["python -m benchmarks.distributed"]
            + list(sys.argv[1:] if argv is None else argv)
        ),
        wall_s=time.perf_counter() - started,
    )
    stem = write(doc, out_dir)
    console.print(rich_table(doc))
    if any(_above(row) for row in doc["scaling"]):
        console.print(ABOVE_CEILING.replace("\\", ""))
    console.print(TORCH_NOTE)
    console.print(doc["note"])
    console.print(f"wrote {stem}.json and {stem}.md in {doc['wall_s']:.0f} s")
    return 1 if any(r["status"] == "error" for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
