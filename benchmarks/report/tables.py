"""The report's tables, as rows of strings: the measurements, compile time
and peak memory, where the Seq2Seq train step's time goes, and the targets;
each as Markdown lines or as a `rich` table."""

from benchmarks import cases as cases_mod
from benchmarks.report.metrics import first_call_ms
from benchmarks.report.metrics import index
from benchmarks.timing import compile_ms

COLUMNS = (cases_mod.NUMPY, cases_mod.TF_KERAS) + cases_mod.KERAS_BACKENDS
TARGET_HEADERS = ("target", "backend", "value", "goal", "met?", "note")


def format_cell(record):
    """One table cell: `median (q1-q3) ms` plus GFLOP/s or tokens/s (and
    step / matmul floor where the record has one); "n/a"
    when the code is not available, "error" when the case failed,
    "timeout" when its process ran out of time."""
    if record is None:
        return "-"
    status = record.get("status")
    if status == "n/a":
        return "n/a (not available)"
    if status == "timeout":
        return "timeout"
    if status != "ok":
        return "error"
    if record.get("exact_match") is not None:
        return (
            f"exact match {record['exact_match']:.3f}, trained "
            f"{record['median_ms'] / 1e3:.0f} s"
        )
    text = (
        f"{format_ms(record['median_ms'])} ({format_ms(record['q1_ms'])}-"
        f"{format_ms(record['q3_ms'])}) ms"
    )
    if record.get("tokens_per_s"):
        text += f", {record['tokens_per_s']:,.0f} tok/s"
    if record.get("gflops"):
        text += f", {record['gflops']:.1f} GF/s"
    if record.get("matmul_floor_ratio"):
        text += f", {record['matmul_floor_ratio']:.2f}x matmul floor"
    if record.get("keys_per_s"):
        text += f", {record['keys_per_s'] / 1e6:.2f} M keys/s"
    if record.get("rss_growth_mb") is not None:
        text += f", RSS +{record['rss_growth_mb']:.1f} MB"
    if record.get("growth_cost_ms") is not None:
        text += f", growth +{format_ms(record['growth_cost_ms'])} ms"
        # Where a growth's time goes (JAX: retrace and XLA compilation).
        if record.get("compile_ms") is not None:
            text += (
                f" (grow {format_ms(record['grow_ms'])}, trace "
                f"{format_ms(record['trace_ms'])}, compile "
                f"{format_ms(record['compile_ms'])})"
            )
        if record.get("recompilations") is not None:
            text += f", {record['recompilations']} recompiled"
    return text


def format_ms(ms):
    """Milliseconds with 3 significant digits (no exponent)."""
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def format_value(value):
    if value is None:
        return "-"
    return f"{value:.2f}"


def measurement_rows(results, selected_cases=cases_mod.CASES):
    """Rows `(workload, variant, cell per column)` of the measurement
    table; cases with no record are left out."""
    table = index(results)
    rows = []
    for case in selected_cases:
        if not any((case.name, b) in table for b in case.backends):
            continue
        cells = [
            format_cell(table.get((case.name, b)))
            if b in case.backends
            else "-"
            for b in COLUMNS
        ]
        rows.append((case.workload, case.variant, cells))
    return rows


def format_cost(record):
    """One cell of the compile and memory table: "compile s, peak MB"; "-"
    for a part the record lacks (older results, cases that do not time a
    first call) and for a case that did not run ("ok")."""
    if not record or record.get("status") != "ok":
        return "-"
    first = first_call_ms(record)
    compile_text = "-"
    if first is not None:
        compile_text = f"{compile_ms(first, record['median_ms']) / 1e3:.2f} s"
    peak = record.get("peak_rss_mb")
    peak_text = "-" if peak is None else f"{peak:.0f} MB"
    if compile_text == peak_text == "-":
        return "-"
    return f"{compile_text}, {peak_text}"


COST_NOTE = (
    "Compile time and peak memory of each case: the first call's wall time "
    "minus the median step (tracing, compilation and first allocations; "
    "the JSON keeps the first call's own time as `first_step_ms`), and the "
    "peak resident memory (`VmHWM`) of the child process during the case, "
    "reset before each case (so it includes the imported libraries)."
)


def cost_rows(results, selected_cases=cases_mod.CASES):
    """Rows `(workload, variant, cell per column)` of the compile and
    memory table, for the cases of the measurement table."""
    table = index(results)
    rows = []
    for case in selected_cases:
        if not any((case.name, b) in table for b in case.backends):
            continue
        cells = [format_cost(table.get((case.name, b))) for b in COLUMNS]
        rows.append((case.workload, case.variant, cells))
    return rows


# The rows of the "where the time goes" table: (key in `parts_ms`, label).
BREAKDOWN_LABELS = (
    ("recurrence_forward", "recurrence forward (embeddings, BiGRU, GRU, "
     "attention)"),
    ("projection_forward", "output projection forward (Dense to the "
     "vocabulary)"),
    ("loss_forward", "loss forward (masked_loss)"),
    ("backward", "backward: recurrence, projection and loss gradients "
     "(the rest)"),
    ("optimizer", "optimizer (Adam) and the train step's fixed cost"),
)  # fmt: skip
BREAKDOWN_CASE = "seq2seq_breakdown"


def breakdown_rows(results):
    """Rows `[part, cell per Keras backend]` of the "where the time goes"
    table: each part's median in ms and its share of the whole step; an
    empty list when the run has no breakdown case."""
    table = index(results)
    records = {
        b: table.get((BREAKDOWN_CASE, b)) for b in cases_mod.KERAS_BACKENDS
    }
    if not any(r and r.get("parts_ms") for r in records.values()):
        return []
    rows = []
    for key, label in BREAKDOWN_LABELS + (("whole", "whole train step"),):
        cells = [label]
        for record in records.values():
            if not record or not record.get("parts_ms"):
                cells.append("-")
                continue
            whole = record["median_ms"]
            ms = whole if key == "whole" else record["parts_ms"].get(key)
            if ms is None:
                cells.append("-")
            else:
                sign = "-" if ms < 0 else ""
                cells.append(
                    f"{sign}{format_ms(abs(ms))} ms ({100 * ms / whole:.0f}%)"
                )
        rows.append(cells)
    return rows


BREAKDOWN_NOTE = (
    "Where the time of the Seq2Seq train step goes (kmodels Translator, "
    "tutorial sizes): separately compiled sub-computations of the same "
    "sizes, timed in the same process as the whole step "
    "(`benchmarks.seq2seq.train_breakdown`); the backward pass is the "
    "whole step minus the other parts, so it also absorbs whatever the "
    "whole step gains by fusing them (it can be negative when it is small)."
)


FLOOR_CASE = "seq2seq_train"
FLOOR_NOTE = (
    "The matmul floor of the Seq2Seq train step (issue 29): each of the "
    "step's matrix products (forward and backward, padded positions "
    "included) at the GFLOP/s the backend's own matmul reaches on that "
    "product's shape, timed in the same process as the step "
    "(`benchmarks.matmul.matmul_floor`). One row per distinct shape "
    "`(batch x) m x k @ k x n`: how many products have it, then per "
    "backend its GFLOP/s and the milliseconds of its products at that rate."
)


def floor_rows(results):
    """Rows `[shape, products, cell per Keras backend]` of the matmul floor
    table (shapes in the order of the first backend that has them, then the
    whole floor and step / floor); an empty list when no `seq2seq_train`
    record has a floor."""
    table = index(results)
    records = {
        b: (table.get((FLOOR_CASE, b)) or {}) for b in cases_mod.KERAS_BACKENDS
    }
    per_shape = {
        b: {tuple(row["shape"]): row for row in r.get("matmul_floor") or ()}
        for b, r in records.items()
    }
    shapes = []
    for rows in per_shape.values():
        shapes += [shape for shape in rows if shape not in shapes]
    if not shapes:
        return []
    out = []
    for shape in shapes:
        batch, m, k, n = shape
        text = f"{m} x {k} @ {k} x {n}"
        if batch > 1:
            text = f"{batch} x ({text})"
        count = next(r[shape]["products"] for r in per_shape.values()
                     if shape in r)  # fmt: skip
        cells = [text, str(count)]
        for b in cases_mod.KERAS_BACKENDS:
            row = per_shape[b].get(shape)
            cells.append(
                "-"
                if row is None
                else f"{row['gflops']:.1f} GF/s, {format_ms(row['ms'])} ms"
            )
        out.append(cells)
    total = ["whole floor (step / floor)", ""]
    for record in records.values():
        floor = record.get("matmul_floor_ms")
        if not floor:
            total.append("-")
            continue
        text = f"{format_ms(floor)} ms"
        if record.get("status") == "ok":
            text += f" ({record['median_ms'] / floor:.2f}x)"
        total.append(text)
    return out + [total]


def markdown_table(headers, rows):
    """A Markdown table as lines: the header, the separator, one line per
    row of cells (strings)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def target_cells(target, met):
    """One target row's cells, with `met` as given (plain or styled)."""
    return [
        target["target"],
        target["backend"],
        format_value(target["value"]),
        target["goal"],
        met,
        target["note"],
    ]


def rich_table(title, headers, rows, groups=None):
    """A `rich.table.Table` of `rows` (lists of strings); with `groups`
    (one key per row), a rule separates rows whose keys differ."""
    from rich.table import Table

    table = Table(title=title)
    for header in headers:
        table.add_column(header)
    for i, cells in enumerate(rows):
        if groups is not None and i and groups[i] != groups[i - 1]:
            table.add_section()
        table.add_row(*cells)
    return table


def rich_tables(doc):
    """The measurement and target tables as `rich.table.Table`s."""
    measurements = rich_table(
        "kmodels benchmarks (median, quartiles)",
        ("workload", "variant") + COLUMNS,
        [
            [workload, variant, *cells]
            for workload, variant, cells in measurement_rows(doc["results"])
        ],
    )
    peak = doc["peak_gflops"]
    colors = {"yes": "green", "no": "red"}
    targets = rich_table(
        "Targets (matmul peak "
        f"{'-' if peak is None else f'{peak:.1f}'} GFLOP/s)",
        TARGET_HEADERS,
        [
            target_cells(
                t,
                f"[{colors[t['met']]}]{t['met']}[/]"
                if t["met"] in colors
                else t["met"],
            )
            for t in doc["targets"]
        ],
    )
    costs = rich_table(
        "Compile time (first call - median step) and peak memory",
        ("workload", "variant") + COLUMNS,
        [
            [workload, variant, *cells]
            for workload, variant, cells in cost_rows(doc["results"])
        ],
    )
    tables = [measurements, costs]
    breakdown = breakdown_rows(doc["results"])
    if breakdown:
        tables.append(
            rich_table(
                "Where the time goes: Seq2Seq train step (separately "
                "compiled parts)",
                ("part",) + cases_mod.KERAS_BACKENDS,
                breakdown,
            )
        )
    floor = floor_rows(doc["results"])
    if floor:
        tables.append(
            rich_table(
                "Matmul floor of the Seq2Seq train step, per shape",
                ("product shape", "products") + cases_mod.KERAS_BACKENDS,
                floor,
            )
        )
    return tuple(tables) + (targets,)
