"""From raw results to figures, one job per module:

- `metrics.py`: derived metrics (GFLOP/s, tokens and keys per second,
  compile time) and the measured matmul peak.
- `targets.py`: the speed and memory targets and their verdicts.
- `tables.py`: the measurement, compile/memory, breakdown, matmul floor
  and target tables, as Markdown lines or `rich` tables.
- `docs_page.py`: the results section of `docs/benchmarks.md` and its
  chart.
- `results_json.py`: the results JSON, its schema check and its writer.
- `run_facts.py`: when, where and with which versions a run ran.
- `bar_chart.py`: the PNG chart.

Pure Python apart from rich/matplotlib output. The run facts, the table
builders (`markdown_table`, `rich_table`, `format_ms`) and the JSON writer
(`check_document`, `write_json`) serve the scaling benchmark too
(`benchmarks.distributed.report`).
"""

from benchmarks.report.bar_chart import chart
from benchmarks.report.docs_page import DOCS_CHART
from benchmarks.report.docs_page import DOCS_END
from benchmarks.report.docs_page import DOCS_START
from benchmarks.report.docs_page import markdown
from benchmarks.report.docs_page import publish_chart
from benchmarks.report.docs_page import run_summary
from benchmarks.report.docs_page import shown_run_date
from benchmarks.report.docs_page import update_docs
from benchmarks.report.docs_page import versions_text
from benchmarks.report.metrics import derive
from benchmarks.report.metrics import first_call_ms
from benchmarks.report.metrics import index
from benchmarks.report.metrics import peak_gflops
from benchmarks.report.results_json import KEYS
from benchmarks.report.results_json import OK_KEYS
from benchmarks.report.results_json import RECORD_KEYS
from benchmarks.report.results_json import SCHEMA_VERSION
from benchmarks.report.results_json import check_document
from benchmarks.report.results_json import document
from benchmarks.report.results_json import validate
from benchmarks.report.results_json import write_json
from benchmarks.report.run_facts import VERSIONED
from benchmarks.report.run_facts import created
from benchmarks.report.run_facts import machine
from benchmarks.report.run_facts import today
from benchmarks.report.run_facts import versions
from benchmarks.report.tables import BREAKDOWN_CASE
from benchmarks.report.tables import BREAKDOWN_LABELS
from benchmarks.report.tables import BREAKDOWN_NOTE
from benchmarks.report.tables import COLUMNS
from benchmarks.report.tables import COST_NOTE
from benchmarks.report.tables import FLOOR_NOTE
from benchmarks.report.tables import TARGET_HEADERS
from benchmarks.report.tables import breakdown_rows
from benchmarks.report.tables import cost_rows
from benchmarks.report.tables import floor_rows
from benchmarks.report.tables import format_cell
from benchmarks.report.tables import format_cost
from benchmarks.report.tables import format_ms
from benchmarks.report.tables import format_value
from benchmarks.report.tables import markdown_table
from benchmarks.report.tables import measurement_rows
from benchmarks.report.tables import rich_table
from benchmarks.report.tables import rich_tables
from benchmarks.report.tables import target_cells
from benchmarks.report.targets import DATES_GOAL
from benchmarks.report.targets import evaluate_targets

__all__ = [
    "BREAKDOWN_CASE",
    "BREAKDOWN_LABELS",
    "BREAKDOWN_NOTE",
    "COLUMNS",
    "COST_NOTE",
    "DATES_GOAL",
    "DOCS_CHART",
    "DOCS_END",
    "DOCS_START",
    "FLOOR_NOTE",
    "KEYS",
    "OK_KEYS",
    "RECORD_KEYS",
    "SCHEMA_VERSION",
    "TARGET_HEADERS",
    "VERSIONED",
    "breakdown_rows",
    "chart",
    "check_document",
    "cost_rows",
    "created",
    "derive",
    "document",
    "evaluate_targets",
    "first_call_ms",
    "floor_rows",
    "format_cell",
    "format_cost",
    "format_ms",
    "format_value",
    "index",
    "machine",
    "markdown",
    "markdown_table",
    "measurement_rows",
    "peak_gflops",
    "publish_chart",
    "rich_table",
    "rich_tables",
    "run_summary",
    "shown_run_date",
    "target_cells",
    "today",
    "update_docs",
    "validate",
    "versions",
    "versions_text",
    "write_json",
]
