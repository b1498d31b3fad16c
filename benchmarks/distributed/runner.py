"""Parent process: `python -m benchmarks.distributed [--quick] [--out DIR]
...`. Starts one child (`benchmarks.distributed.child`) per backend and
device count, prints the table and writes the results (see
`benchmarks.distributed`)."""

import argparse
import json
import os
import sys
import tempfile
import time

from benchmarks import runner
from benchmarks.distributed import report
from benchmarks.distributed.engines import ENGINES
from benchmarks.distributed.engines import unsupported_record
from benchmarks.distributed.scaling import BACKENDS
from benchmarks.distributed.scaling import DEVICE_COUNTS
from benchmarks.distributed.scaling import WORKLOADS
from benchmarks.distributed.scaling import batches_for
from benchmarks.report import format_ms


def run_child(backend, devices, workloads, quick, timeout, on_result):
    """Runs one child (`benchmarks.distributed.child`) with `devices`
    virtual devices; calls `on_result(record)` for every measurement. A
    crash gives one "error" record for the whole child, a timeout one
    "timeout" record."""
    batches = batches_for(workloads, devices, quick)
    command = [
        sys.executable, "-m", "benchmarks.distributed.child",
        "--backend", backend, "--devices", str(devices),
        "--workloads", ",".join(workloads), "--batches", json.dumps(batches),
    ]  # fmt: skip
    if quick:
        command.append("--quick")
    expected = sum(len(b) for b in batches.values())
    if backend not in ENGINES:
        expected = 1  # the "n/a" record
    seen = []

    def on_record(record):
        seen.append(record)
        on_result(record)

    why, tail, timed_out = runner.stream_records(
        command, runner.child_env(backend), timeout, on_record
    )
    if len(seen) < expected:
        on_result(
            {
                "backend": backend,
                "workload": None,
                "devices": devices,
                "status": "timeout" if timed_out else "error",
                "error": f"{why} after {len(seen)} of {expected} results: "
                f"{tail}",
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
        if record["status"] in ("error", "timeout"):
            console.print(
                f"[red]{record['backend']} {record.get('workload')} on "
                f"{record.get('devices')} devices: {record['error'][:300]}[/]"
            )
        elif record["status"] == "ok":
            console.print(
                f"{record['backend']} {record['workload']} "
                f"devices={record['devices']} batch={record['global_batch']}:"
                f" {format_ms(record['median_ms'])} ms/step"
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

    doc = report.document(
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
    stem = report.write(doc, out_dir)
    console.print(report.rich_table(doc))
    if any(report.above_ceiling(row) for row in doc["scaling"]):
        console.print(report.ABOVE_CEILING.replace("\\", ""))
    console.print(report.TORCH_NOTE)
    console.print(doc["note"])
    console.print(f"wrote {stem}.json and {stem}.md in {doc['wall_s']:.0f} s")
    failed = ("error", "timeout")
    return 1 if any(r["status"] in failed for r in results) else 0
