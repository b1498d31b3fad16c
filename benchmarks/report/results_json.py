"""The results JSON (`benchmarks/results/<date>.json`): the document of one
run, its schema check and its writer. `check_document` and `write_json`
serve the scaling benchmark's document too."""

import json

from benchmarks.report.metrics import derive
from benchmarks.report.metrics import peak_gflops
from benchmarks.report.targets import evaluate_targets

SCHEMA_VERSION = 1
# Keys every result record has (see `benchmarks.child`).
RECORD_KEYS = ("case", "backend", "status")
# Keys an "ok" record adds.
OK_KEYS = ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "steps")
# The keys of the document (see `document`) that `validate` requires.
KEYS = ("schema_version", "created", "quick", "command", "machine",
        "versions", "results", "targets")  # fmt: skip


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
        if record["status"] not in ("ok", "n/a", "error", "timeout"):
            raise ValueError(f"unknown status {record['status']!r}")


def write_json(doc, path, check=validate):
    """Checks `doc` with `check` (raises ValueError) and writes it to
    `path` as indented JSON."""
    check(doc)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
