"""The results section of `docs/benchmarks.md`: the run's facts and tables
as Markdown between two markers, and the chart beside the page (MkDocs
serves files from `docs/` only)."""

import os
import re
import shutil

from benchmarks import cases as cases_mod
from benchmarks.report.metrics import peak_gflops
from benchmarks.report.tables import BREAKDOWN_NOTE
from benchmarks.report.tables import COLUMNS
from benchmarks.report.tables import COST_NOTE
from benchmarks.report.tables import FLOOR_NOTE
from benchmarks.report.tables import TARGET_HEADERS
from benchmarks.report.tables import breakdown_rows
from benchmarks.report.tables import cost_rows
from benchmarks.report.tables import floor_rows
from benchmarks.report.tables import markdown_table
from benchmarks.report.tables import measurement_rows
from benchmarks.report.tables import target_cells

DOCS_START = "<!-- benchmarks:results:start -->"
DOCS_END = "<!-- benchmarks:results:end -->"
# The chart of the run the page shows, beside docs/benchmarks.md.
DOCS_CHART = "benchmarks.png"


def run_summary(meta):
    """The opening of a results section: "Run of <created> (<quick|full>
    sizes), command `<command>`; <n> CPU cores"."""
    return (
        f"Run of {meta['created']} ({'quick' if meta['quick'] else 'full'}"
        f" sizes), command `{meta['command']}`; "
        f"{meta['machine']['cpu_count']} CPU cores"
    )


def versions_text(versions):
    """`{"keras": "3.15.1", ...}` as "keras 3.15.1, ..."."""
    return ", ".join(f"{k} {v}" for k, v in versions.items())


def markdown(results, targets, meta):
    """The docs section: run facts, the measurement table, the target table."""
    lines = [
        run_summary(meta)
        + (f" (--threads {meta['threads']})" if meta.get("threads") else "")
        + ", "
        + versions_text(meta["versions"])
        + ".",
        "",
        "Each cell: median step time (first-third quartile) over the timed "
        "steps; GF/s is the achieved GFLOP/s of the analytic count at the "
        "median.",
        "",
    ]
    lines += markdown_table(
        ("workload", "variant") + COLUMNS,
        [
            [workload, variant, *cells]
            for workload, variant, cells in measurement_rows(results)
        ],
    )
    lines += ["", COST_NOTE, ""]
    lines += markdown_table(
        ("workload", "variant") + COLUMNS,
        [
            [workload, variant, *cells]
            for workload, variant, cells in cost_rows(results)
        ],
    )
    breakdown = breakdown_rows(results)
    if breakdown:
        lines += ["", BREAKDOWN_NOTE, ""]
        lines += markdown_table(("part",) + cases_mod.KERAS_BACKENDS, breakdown)
    floor = floor_rows(results)
    if floor:
        lines += ["", FLOOR_NOTE, ""]
        lines += markdown_table(
            ("product shape", "products") + cases_mod.KERAS_BACKENDS, floor
        )
    peak = peak_gflops(results)
    lines += [
        "",
        f"Measured float32 matmul peak: "
        f"{'-' if peak is None else f'{peak:.1f}'} GFLOP/s.",
        "",
    ]
    lines += markdown_table(
        TARGET_HEADERS, [target_cells(t, t["met"]) for t in targets]
    )
    lines += ["", f"![Benchmark chart]({DOCS_CHART})"]
    return "\n".join(lines) + "\n"


def update_docs(path, section):
    """Replaces the text between the DOCS_START and DOCS_END markers of
    `path` with `section` (appends the markers if absent)."""
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    block = f"{DOCS_START}\n{section}{DOCS_END}"
    pattern = re.compile(
        re.escape(DOCS_START) + ".*?" + re.escape(DOCS_END), re.DOTALL
    )
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def shown_run_date(path):
    """The date ("2026-12-01") of the run whose results section `path`
    shows, or None (no page, no section, no run summary in it)."""
    if not os.path.exists(path):
        return None
    text = open(path, encoding="utf-8").read()
    start, end = text.find(DOCS_START), text.find(DOCS_END)
    if start < 0 or end < start:
        return None
    found = re.search(r"Run of (\d{4}-\d{2}-\d{2})", text[start:end])
    return found.group(1) if found else None


def publish_chart(chart_path, docs_path):
    """Moves the run's chart `chart_path` beside the page `docs_path` as
    `DOCS_CHART`, so the repository holds each chart once; returns its new
    path. Call it before `update_docs`.

    The chart the page showed goes back beside its run's JSON, as
    `<date>.png` in the folder of `chart_path`, when that run's
    `<date>.json` is there and has no chart yet; otherwise (another folder,
    or a run of the same date) the new chart replaces it."""
    folder = os.path.dirname(chart_path)
    target = os.path.join(os.path.dirname(docs_path), DOCS_CHART)
    date = shown_run_date(docs_path)
    if date and os.path.exists(target):
        old = os.path.join(folder, f"{date}.png")
        if (
            os.path.abspath(old) != os.path.abspath(chart_path)
            and not os.path.exists(old)
            and os.path.exists(os.path.join(folder, f"{date}.json"))
        ):
            shutil.move(target, old)
    shutil.move(chart_path, target)
    return target
