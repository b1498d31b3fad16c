"""The scaling benchmark's results: the JSON document, its checks, and the
table as Markdown (for `docs/distributed.md`) and as a `rich` table. The
table builders, run facts and JSON writer are `benchmarks.report`'s."""

import math
import os

from benchmarks import report
from benchmarks.distributed.engines import ENGINES
from benchmarks.distributed.engines import unsupported_record
from benchmarks.distributed.scaling import scaling_rows
from benchmarks.distributed.scaling import sizes_for
from benchmarks.distributed.scaling import timing_for

SCHEMA_VERSION = 1
WORKLOAD_NAMES = {
    "transformer": "Transformer encoder",
    "seq2seq": "Translator",
}
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
ABOVE_CEILING = (
    "\\* above the ceiling: the 1-device step is not compute-bound (tiny "
    "sizes: per-step overhead) or the machine was busy; not a real speed-up."
)
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
# The keys of the document (see `document`) that `validate` requires.
KEYS = ("schema_version", "kind", "created", "quick", "command", "machine",
        "versions", "device_counts", "note", "results", "scaling")  # fmt: skip
# The timings of an "ok" record, each a positive finite number.
TIMINGS = ("median_ms", "q1_ms", "q3_ms", "examples_per_s", "first_step_s")


def above_ceiling(row):
    """Whether the speed-up exceeds what the cores allow (by over 5%, more
    than timing noise on an idle machine)."""
    return row["speedup"] is not None and row["speedup"] > 1.05 * row["ceiling"]


def _rate(value):
    """Examples/s: whole numbers from 100 up, 3 significant digits below."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _cells(row):
    if row["status"] != "ok":
        return [row["status"]] + ["-"] * 5
    ms = report.format_ms
    return [
        f"{ms(row['median_ms'])} ({ms(row['q1_ms'])}-{ms(row['q3_ms'])})",
        _rate(row["examples_per_s"]),
        report.format_value(row["speedup"])
        + ("*" if above_ceiling(row) else ""),
        "-" if row["efficiency"] is None else f"{row['efficiency']:.0%}",
        str(row["ceiling"]),
        f"{row['first_step_s']:.1f}",
    ]


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
        report.run_summary(doc)
        + f", device counts {', '.join(map(str, doc['device_counts']))}; "
        + f"{engines}; "
        + report.versions_text(doc["versions"])
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
    ]
    lines += report.markdown_table(HEADERS, table_rows(doc))
    if any(above_ceiling(row) for row in doc["scaling"]):
        lines += ["", ABOVE_CEILING]
    lines += ["", TORCH_NOTE, "", _note(doc)]
    return "\n".join(lines) + "\n"


def rich_table(doc):
    """The results as a `rich.table.Table`, a rule between the scalings,
    backends and workloads."""
    return report.rich_table(
        "Data-parallel scaling on virtual CPU devices "
        f"({doc['machine']['cpu_count']} cores)",
        HEADERS,
        table_rows(doc),
        groups=[
            (row["scaling"], row["backend"], row["workload"])
            for row in doc["scaling"]
        ],
    )


def _finite_positive(value):
    return (
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    )


def validate(doc):
    """Raises ValueError if `doc` does not follow this benchmark's schema:
    its keys, and for every "ok" measurement positive, finite timings."""
    report.check_document(doc, KEYS, SCHEMA_VERSION, "distributed results JSON")
    for record in doc["results"]:
        if record.get("status") not in ("ok", "n/a", "error", "timeout"):
            raise ValueError(f"unknown status {record.get('status')!r}")
        if record["status"] != "ok":
            continue
        for key in TIMINGS:
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
    machine = report.machine()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "distributed",
        "created": report.created(),
        "quick": quick,
        "command": command,
        "wall_s": round(wall_s, 1),
        "machine": machine,
        "versions": report.versions(),
        "device_counts": list(device_counts),
        "engines": dict(ENGINES),
        "unsupported": {"torch": unsupported_record("torch")["error"]},
        "sizes": {w: sizes_for(w, quick) for w in workloads},
        "timing": timing_for(quick),
        "results": list(results),
        "scaling": scaling_rows(results, machine["cpu_count"], quick),
    }
    doc["note"] = _note(doc)
    return doc


def write(doc, out_dir):
    """Validates `doc` and writes `<out_dir>/distributed-<date>.json` and
    `.md` (see `markdown`); returns the path without the extension."""
    stem = os.path.join(out_dir, f"distributed-{report.today()}")
    report.write_json(doc, stem + ".json", check=validate)
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(doc))
    return stem
