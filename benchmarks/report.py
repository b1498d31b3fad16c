"""From raw results to figures: derived metrics, targets, tables, JSON, the
chart and the docs table. Pure Python apart from rich/matplotlib output.

The run facts (`created`, `machine`, `versions`), the table builders
(`markdown_table`, `rich_table`, `format_ms`) and the JSON writer
(`check_document`, `write_json`) are shared with the scaling benchmark
(`benchmarks.distributed.report`)."""

import datetime
import importlib.metadata
import json
import os
import platform
import re
import time

from benchmarks import cases as cases_mod
from benchmarks.timing import compile_ms

SCHEMA_VERSION = 1
COLUMNS = (cases_mod.NUMPY, cases_mod.TF_KERAS) + cases_mod.KERAS_BACKENDS
DOCS_START = "<!-- benchmarks:results:start -->"
DOCS_END = "<!-- benchmarks:results:end -->"
# The chart's copy beside docs/benchmarks.md (MkDocs serves docs/ only).
DOCS_CHART = "benchmarks.png"
# Keys every result record has (see `benchmarks.child`).
RECORD_KEYS = ("case", "backend", "status")
# Keys an "ok" record adds.
OK_KEYS = ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "steps")
# The keys of the document (see `document`) that `validate` requires.
KEYS = ("schema_version", "created", "quick", "command", "machine",
        "versions", "results", "targets")  # fmt: skip
TARGET_HEADERS = ("target", "backend", "value", "goal", "met?", "note")
# The distributions whose versions a run records.
VERSIONED = ("keras", "keras-hub", "tensorflow", "tf_keras", "jax", "torch",
             "numpy")  # fmt: skip


def derive(record):
    """Adds `gflops` (achieved GFLOP/s at the median) and, for generation,
    `tokens_per_s` to an "ok" record; returns a new dict."""
    record = dict(record)
    if record.get("status") != "ok":
        return record
    seconds = record["median_ms"] / 1e3
    if record.get("flops"):
        record["gflops"] = record["flops"] / seconds / 1e9
    if record.get("tokens"):
        record["tokens_per_s"] = record["tokens"] / seconds
    if record.get("keys"):
        record["keys_per_s"] = record["keys"] / seconds
    first = first_call_ms(record)
    if first is not None:
        record["compile_ms"] = compile_ms(first, record["median_ms"])
    return record


def first_call_ms(record):
    """The wall time of the case's first call, or None: `first_call_ms`
    where the case times it apart (the eager cases), else the first call
    `benchmarks.timing.measure` made (`first_step_ms`)."""
    first = record.get("first_call_ms")
    return record.get("first_step_ms") if first is None else first


def index(results):
    """`{(case, backend): record}` of the records."""
    return {(r["case"], r["backend"]): r for r in results}


def peak_gflops(results):
    """The machine's limit: the best float32 matmul GFLOP/s measured in this
    run (NumPy or any backend), or None."""
    values = [
        r["gflops"]
        for r in results
        if r["case"].startswith("matmul") and r.get("gflops")
    ]
    return max(values) if values else None


def _ms(table, case, backend):
    record = table.get((case, backend))
    if record and record.get("status") == "ok":
        return record["median_ms"]
    return None


def _contracts_on_ms(table, backend):
    """The checked steps timed in alternation with the unchecked case."""
    if _ms(table, "seq2seq_train_unchecked", backend) is None:
        return None
    return table[("seq2seq_train_unchecked", backend)].get("contracts_on_ms")


def _hub_alternated_ms(table, backend):
    """The keras-hub model's median timed in alternation with the
    PositionalEmbedding case (results before it: the case of its own)."""
    record = table.get(("transformer_positional", backend)) or {}
    if record.get("hub_alternated_ms") is not None:
        return record["hub_alternated_ms"]
    return _ms(table, "transformer_hub", backend)


def _target(name, backend, value, goal, better, binding=True, note=""):
    """One target row. `better` is ">=" (higher is better) or "<="."""
    if value is None:
        met = "n/a"
    elif not binding:
        met = "info"
    elif better == ">=":
        met = "yes" if value >= goal else "no"
    else:
        met = "yes" if value <= goal else "no"
    return {
        "target": name,
        "backend": backend,
        "value": value,
        "goal": f"{better} {goal:g}" if goal is not None else "",
        "met": met,
        "note": note,
    }


def _ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def evaluate_targets(results, backends=cases_mod.KERAS_BACKENDS):
    """The issue's targets as rows `{target, backend, value, goal, met,
    note}`; `met` is "yes", "no", "n/a" (not measured) or "info" (a ratio
    shown for comparison where the issue sets no target)."""
    table = index(results)
    rows = []
    original = _ms(table, "seq2seq_train_original", cases_mod.TF_KERAS)
    speedups = {
        b: _ratio(original, _ms(table, "seq2seq_train", b)) for b in backends
    }
    measured = {b: v for b, v in speedups.items() if v is not None}
    best = max(measured, key=measured.get) if measured else None
    rows.append(
        _target(
            "Seq2Seq train: best speed-up vs original",
            best or "-",
            measured.get(best),
            2.0,
            ">=",
        )
    )
    for b in backends:
        rows.append(
            _target(
                "Seq2Seq train: speed-up vs original",
                b,
                speedups[b],
                1.3,
                ">=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Seq2Seq train: input contracts on / off time",
                b,
                _ratio(
                    _contracts_on_ms(table, b),
                    _ms(table, "seq2seq_train_unchecked", b),
                ),
                1.05,
                "<=",
            )
        )
    peak = peak_gflops(results)
    best_gflops = None
    if best is not None:
        best_gflops = table[("seq2seq_train", best)].get("gflops")
    rows.append(
        _target(
            "Seq2Seq train: best GFLOP/s / matmul peak",
            best or "-",
            _ratio(best_gflops, peak),
            0.5,
            ">=",
        )
    )
    for b in backends:
        rows.append(
            _target(
                "BiGRU: masked (kmodels) / unmasked time",
                b,
                _ratio(
                    _ms(table, "bigru_masked", b),
                    _ms(table, "bigru_unmasked", b),
                ),
                1.1,
                "<=",
            )
        )
    original_tps = table.get(("generate_original", cases_mod.TF_KERAS), {})
    for b in backends:
        tps = table.get(("generate", b), {}).get("tokens_per_s")
        rows.append(
            _target(
                "Generation: tokens/s vs original loop",
                b,
                _ratio(tps, original_tps.get("tokens_per_s")),
                5.0,
                ">=",
                note="torch: the native greedy loop" if b == "torch" else "",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Generation: beam search (4 beams) / greedy time",
                b,
                _ratio(
                    _ms(table, "generate_beam", b), _ms(table, "generate", b)
                ),
                6.0,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "PositionalEmbedding / TokenAndPosition time",
                b,
                _ratio(
                    _ms(table, "transformer_positional", b),
                    _hub_alternated_ms(table, b),
                ),
                1.05,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Growable: 1M rows / 10k rows time",
                b,
                _ratio(
                    _ms(table, "growable_1m", b), _ms(table, "growable_10k", b)
                ),
                1.5,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Growable / keras Embedding time, 10k",
                b,
                _ratio(
                    _ms(table, "growable_10k", b),
                    _ms(table, "embedding_10k", b),
                ),
                1.0,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "keras Embedding: 1M / 10k rows time",
                b,
                _ratio(
                    _ms(table, "embedding_1m", b),
                    _ms(table, "embedding_10k", b),
                ),
                None,
                "<=",
                binding=False,
                note="reference: dense gradient and Adam update",
            )
        )
    for eager, predict, sizes in (
        ("eager_call_tiny", "predict_tiny", "tiny"),
        ("eager_call", "predict", "tutorial sizes"),
    ):
        for b in backends:
            rows.append(
                _target(
                    f"Eager call / predict_on_batch time, {sizes}",
                    b,
                    _ratio(_ms(table, eager, b), _ms(table, predict, b)),
                    3.0,
                    "<=",
                )
            )
    for b in backends:
        rows.append(
            _target(
                "TextTranslator.translate, one sentence (ms)",
                b,
                _ms(table, "translate_one", b),
                10.0,
                "<=",
            )
        )
    for b in backends:
        record = table.get(("eager_memory", b)) or {}
        rows.append(
            _target(
                "Resident memory growth over the eager calls (MB)",
                b,
                record.get("rss_growth_mb"),
                20.0,
                "<=",
                note="the largest of the six (Encoder, Decoder, "
                "CrossAttention, Autoencoder, Translator, translate)",
            )
        )
    rows += _keys_targets(table, backends)
    rows += _mixed_precision_targets(table, backends)
    return rows


# The held-out exact match the dates demo must reach (issue 14).
DATES_GOAL = 0.95


def _mixed_precision_targets(table, backends):
    """Issue 14: the `mixed_bfloat16` train step against the float32
    original and kmodels' own float32 step (for the record: the ratio
    depends on the CPU's bfloat16 support), and the dates demo's exact
    match under the policy (>= 0.95) next to float32's."""
    rows = []
    original = _ms(table, "seq2seq_train_original", cases_mod.TF_KERAS)
    for b in backends:
        bf16 = _ms(table, "seq2seq_train_bf16", b)
        rows.append(
            _target(
                "Seq2Seq train: mixed_bfloat16 / float32 original time",
                b,
                _ratio(bf16, original),
                None,
                "<=",
                binding=False,
                note="tutorial tf.keras step in float32",
            )
        )
        rows.append(
            _target(
                "Seq2Seq train: mixed_bfloat16 / float32 time",
                b,
                _ratio(bf16, _ms(table, "seq2seq_train", b)),
                None,
                "<=",
                binding=False,
                note="kmodels Translator, same backend",
            )
        )
    for case, binding in (("dates_bf16", True), ("dates_float32", False)):
        if not any((case, b) in table for b in backends):
            continue
        policy = "mixed_bfloat16" if case == "dates_bf16" else "float32"
        for b in backends:
            record = table.get((case, b)) or {}
            rows.append(
                _target(
                    f"Dates demo: held-out exact match, {policy}",
                    b,
                    record.get("exact_match"),
                    DATES_GOAL,
                    ">=",
                    binding=binding,
                    note="" if binding else "float32 reference",
                )
            )
    return rows


def _keys_targets(table, backends):
    """Issue 15: `KeyIndex.lookup` throughput, in millions of keys/s, and
    its speed-up over the per-key loop (for the record; no target)."""
    rows = []
    measured = cases_mod.CASES_BY_NAME["keys_int64"].backends
    for b in [b for b in backends if b in measured]:
        for dtype, goal in (("int64", 5.0), ("string", 1.0)):
            new = table.get((f"keys_{dtype}", b), {}).get("keys_per_s")
            old = table.get((f"keys_{dtype}_loop", b), {}).get("keys_per_s")
            rows.append(
                _target(
                    f"KeyIndex: M {dtype} keys/s",
                    b,
                    None if new is None else new / 1e6,
                    goal,
                    ">=",
                    note="NumPy-side: one child measures it",
                )
            )
            cpu_ms = table.get((f"keys_{dtype}", b), {}).get("cpu_ms")
            rows.append(
                _target(
                    f"KeyIndex: M {dtype} keys per CPU second",
                    b,
                    _ratio(_keys(table, f"keys_{dtype}", b), cpu_ms),
                    None,
                    ">=",
                    binding=False,
                    note="the process's CPU time: one free core",
                )
            )
            rows.append(
                _target(
                    f"KeyIndex: {dtype} keys/s / per-key loop",
                    b,
                    _ratio(new, old),
                    None,
                    ">=",
                    binding=False,
                    note="speed-up over the loop it replaced",
                )
            )
    for b in [b for b in backends if b in measured]:
        record = table.get(("keys_stream_unlocked", b)) or {}
        rows.append(
            _target(
                "KeyIndex: lock on / off time, 64-key batches",
                b,
                _ratio(
                    record.get("locked_ms"),
                    _ms(table, "keys_stream_unlocked", b),
                ),
                1.1,
                "<=",
                note="one thread; alternated in one process",
            )
        )
    return rows


def _keys(table, case, backend):
    """Thousands of keys per step of a keys case (keys per ms / 1e3 gives
    millions of keys per second), or None."""
    record = table.get((case, backend), {})
    return record["keys"] / 1e3 if record.get("keys") else None


def format_cell(record):
    """One table cell: `median (q1-q3) ms` plus GFLOP/s or tokens/s; "n/a"
    when the code is not available, "error" when the case failed."""
    if record is None:
        return "-"
    status = record.get("status")
    if status == "n/a":
        return "n/a (not available)"
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
    if record.get("keys_per_s"):
        text += f", {record['keys_per_s'] / 1e6:.2f} M keys/s"
    if record.get("rss_growth_mb") is not None:
        text += f", RSS +{record['rss_growth_mb']:.1f} MB"
    if record.get("growth_cost_ms") is not None:
        text += f", growth +{format_ms(record['growth_cost_ms'])} ms"
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


def markdown_table(headers, rows):
    """A Markdown table as lines: the header, the separator, one line per
    row of cells (strings)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


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


def _target_cells(target, met):
    """One target row's cells, with `met` as given (plain or styled)."""
    return [
        target["target"],
        target["backend"],
        format_value(target["value"]),
        target["goal"],
        met,
        target["note"],
    ]


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
    peak = peak_gflops(results)
    lines += [
        "",
        f"Measured float32 matmul peak: "
        f"{'-' if peak is None else f'{peak:.1f}'} GFLOP/s.",
        "",
    ]
    lines += markdown_table(
        TARGET_HEADERS, [_target_cells(t, t["met"]) for t in targets]
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


def document(results, meta):
    """The JSON document written to `benchmarks/results/<date>.json`."""
    results = [derive(r) for r in results]
    return {
        "schema_version": SCHEMA_VERSION,
        **meta,
        "peak_gflops": peak_gflops(results),
        "results": results,
        "targets": evaluate_targets(results),
    }


def check_document(doc, keys, schema_version, name):
    """Raises ValueError if `doc` misses one of `keys` or has another
    `schema_version`; `name` says which document in the message."""
    for key in keys:
        if key not in doc:
            raise ValueError(f"{name} misses key {key!r}")
    if doc["schema_version"] != schema_version:
        raise ValueError(
            f"schema_version {schema_version} expected; got "
            f"{doc['schema_version']!r}"
        )


def validate(doc):
    """Raises ValueError if `doc` does not follow the results schema."""
    check_document(doc, KEYS, SCHEMA_VERSION, "results JSON")
    for record in doc["results"]:
        missing = [k for k in RECORD_KEYS if k not in record]
        if record.get("status") == "ok":
            missing += [k for k in OK_KEYS if k not in record]
        if missing:
            raise ValueError(f"result {record.get('case')!r} misses {missing}")
        if record["status"] not in ("ok", "n/a", "error"):
            raise ValueError(f"unknown status {record['status']!r}")


def write_json(doc, path, check=validate):
    """Checks `doc` with `check` (raises ValueError) and writes it to
    `path` as indented JSON."""
    check(doc)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def created():
    """The run's time stamp, e.g. "2026-11-29 19:32 UTC"."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def machine():
    """The machine facts a results document records."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def versions():
    """`{distribution: version}` of the installed `VERSIONED` ones."""
    out = {}
    for dist in VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


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
            _target_cells(
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
    return tuple(tables) + (targets,)


def chart(doc, path):
    """A PNG bar chart: one panel per workload, one bar per variant and
    backend (median, whiskers at the quartiles)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = index(doc["results"])
    workloads = []
    for case in cases_mod.CASES:
        measured = case.unit != "exact match" and any(
            (table.get((case.name, b)) or {}).get("status") == "ok"
            for b in case.backends
        )
        if measured and case.workload not in workloads:
            workloads.append(case.workload)
    if not workloads:
        workloads = [cases_mod.CASES[0].workload]  # an empty chart
    colors = {
        cases_mod.NUMPY: "#7f7f7f",
        cases_mod.TF_KERAS: "#8c564b",
        "tensorflow": "#ff7f0e",
        "jax": "#1f77b4",
        "torch": "#d62728",
    }
    fig, axes = plt.subplots(
        len(workloads), 1, figsize=(10, 2.2 * len(workloads) + 1),
        squeeze=False,
    )  # fmt: skip
    axes = axes[:, 0]
    for ax, workload in zip(axes, workloads):
        labels, values, lows, highs, bar_colors = [], [], [], [], []
        for case in cases_mod.CASES:
            if case.workload != workload or case.unit == "exact match":
                continue
            for backend in case.backends:
                r = table.get((case.name, backend))
                if not r or r.get("status") != "ok":
                    continue
                if case.unit == "tokens/s":
                    value = r["tokens_per_s"]
                    low = r["tokens"] / (r["q3_ms"] / 1e3)
                    high = r["tokens"] / (r["q1_ms"] / 1e3)
                elif case.unit == "keys/s":
                    value = r["keys_per_s"]
                    low = r["keys"] / (r["q3_ms"] / 1e3)
                    high = r["keys"] / (r["q1_ms"] / 1e3)
                elif case.name.startswith("matmul"):
                    value = r["gflops"]
                    low = r["flops"] / (r["q3_ms"] / 1e3) / 1e9
                    high = r["flops"] / (r["q1_ms"] / 1e3) / 1e9
                else:
                    value, low, high = r["median_ms"], r["q1_ms"], r["q3_ms"]
                labels.append(f"{case.variant} [{backend}]")
                values.append(value)
                lows.append(max(value - low, 0))
                highs.append(max(high - value, 0))
                bar_colors.append(colors[backend])
        unit = "ms / step (lower is better)"
        if workload == "Embedding growth event":
            unit = "ms for a one-batch fit that grows the table once"
        if workload == "Seq2Seq generation":
            unit = "tokens / s (higher is better)"
        elif workload == cases_mod.KEYS_WORKLOAD:
            unit = "keys / s (higher is better)"
        elif workload == "Matmul float32":
            unit = "GFLOP/s (higher is better)"
        ax.barh(
            range(len(values)),
            values,
            xerr=[lows, highs],
            color=bar_colors,
            capsize=2,
        )
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 100 * min(positive):
            ax.set_xscale("log")  # e.g. 1 ms and 1 s steps in one panel
            unit = unit.replace(" (", ", log scale (")
        ax.set_yticks(range(len(values)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{workload}: {unit}", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    title = f"kmodels benchmarks {doc['created']}"
    if doc["quick"]:
        title += " (quick sizes: smoke test, not a measurement)"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)
