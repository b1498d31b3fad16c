"""Derived metrics, targets, table formatting, JSON schema and the docs
update of the benchmark report."""

import glob
import json
import os
import re

import pytest

from benchmarks import report
from benchmarks import runner

pytestmark = pytest.mark.backend_independent(
    reason="the report's tables, targets and chart: Python over records"
)


def _ok(case, backend, median_ms, **extra):
    return dict(
        case=case,
        backend=backend,
        status="ok",
        median_ms=median_ms,
        q1_ms=median_ms * 0.9,
        q3_ms=median_ms * 1.1,
        min_ms=median_ms * 0.8,
        max_ms=median_ms * 1.2,
        steps=5,
        **extra,
    )


def _results():
    """A synthetic run with round numbers whose ratios are known."""
    return [
        report.derive(r)
        for r in [
            _ok("matmul_numpy", "numpy", 100.0, flops=10e9),  # 100 GF/s
            _ok("matmul_keras", "jax", 200.0, flops=10e9),  # 50 GF/s
            _ok("seq2seq_train_original", "tf_keras", 400.0, flops=20e9),
            _ok("seq2seq_train", "tensorflow", 320.0, flops=20e9),
            _ok("seq2seq_train", "jax", 200.0, flops=20e9),  # 100 GF/s
            _ok("seq2seq_train", "torch", 250.0, flops=20e9),
            _ok("seq2seq_train_unchecked", "jax", 190.0, contracts_on_ms=200.0),
            _ok(
                "seq2seq_train_unchecked", "torch", 245.0, contracts_on_ms=250.0
            ),
            _ok("generate_original", "tf_keras", 1000.0, tokens=1000),
            _ok("generate", "tensorflow", 100.0, tokens=1000),
            _ok("generate", "jax", 400.0, tokens=1000),
            _ok("bigru_unmasked", "torch", 100.0),
            _ok("bigru_masked", "torch", 135.0),
            {
                "case": "transformer_positional",
                "backend": "jax",
                "status": "n/a",
                "error": "kmodels.models.transformer_encoder not available",
            },
            _ok("transformer_hub", "jax", 50.0),
        ]
    ]


def _target(targets, name, backend):
    (row,) = [
        t
        for t in targets
        if t["target"].startswith(name) and t["backend"] == backend
    ]
    return row


def test_derive_adds_gflops_and_tokens_per_second():
    record = report.derive(_ok("x", "jax", 250.0, flops=5e9, tokens=3200))
    assert record["gflops"] == pytest.approx(20.0, rel=1e-12)
    assert record["tokens_per_s"] == pytest.approx(12800.0, rel=1e-12)
    # Failed records are left alone.
    assert report.derive({"status": "error"}) == {"status": "error"}


def test_peak_is_the_best_measured_matmul():
    assert report.peak_gflops(_results()) == pytest.approx(100.0)
    assert report.peak_gflops([]) is None


def test_targets_ratios_and_verdicts():
    targets = report.evaluate_targets(_results())
    best = _target(targets, "Seq2Seq train: best speed-up", "jax")
    assert best["value"] == pytest.approx(2.0) and best["met"] == "yes"
    tf = _target(targets, "Seq2Seq train: speed-up", "tensorflow")
    assert tf["value"] == pytest.approx(1.25) and tf["met"] == "no"
    assert tf["goal"] == ">= 1.3"
    peak = _target(targets, "Seq2Seq train: best GFLOP/s", "jax")
    assert peak["value"] == pytest.approx(1.0) and peak["met"] == "yes"
    torch_gru = _target(targets, "BiGRU: masked", "torch")
    assert torch_gru["value"] == pytest.approx(1.35)
    assert torch_gru["met"] == "no"
    # The BiGRU target binds every backend; jax is not measured here.
    assert _target(targets, "BiGRU: masked", "jax")["met"] == "n/a"
    assert peak["goal"] == ">= 0.5"
    gen_tf = _target(targets, "Generation: tokens/s", "tensorflow")
    assert gen_tf["value"] == pytest.approx(10.0) and gen_tf["met"] == "yes"
    gen_jax = _target(targets, "Generation: tokens/s", "jax")
    assert gen_jax["value"] == pytest.approx(2.5) and gen_jax["met"] == "no"
    # Input contracts: checked / unchecked step time, at most 1.05.
    contracts_jax = _target(targets, "Seq2Seq train: input contracts", "jax")
    assert contracts_jax["value"] == pytest.approx(200.0 / 190.0)
    assert contracts_jax["met"] == "no"
    contracts_torch = _target(
        targets, "Seq2Seq train: input contracts", "torch"
    )
    assert contracts_torch["value"] == pytest.approx(250.0 / 245.0)
    assert contracts_torch["met"] == "yes"
    tf_contracts = _target(
        targets, "Seq2Seq train: input contracts", "tensorflow"
    )
    assert tf_contracts["met"] == "n/a"
    # A kmodels case that could not be imported gives "n/a", not a verdict.
    pos = _target(targets, "PositionalEmbedding", "jax")
    assert pos["value"] is None and pos["met"] == "n/a"


def test_growth_event_target_binds_every_backend():
    results = [
        {
            "case": "growth_event",
            "backend": "jax",
            "growth_cost_ms": 150.0,
            "recompilations": 1,
        },
        {
            "case": "growth_event",
            "backend": "tensorflow",
            "growth_cost_ms": 250.0,
        },
    ]
    results = [dict(r, status="ok", median_ms=1.0) for r in results]
    targets = report.evaluate_targets(results)
    name = "Embedding growth event: cost above a step"
    jax_row = _target(targets, name, "jax")
    assert jax_row["value"] == 150.0 and jax_row["met"] == "yes"
    assert (
        jax_row["goal"] == "<= 200"
        and "1 of them recompiled" in (jax_row["note"])
    )
    assert _target(targets, name, "tensorflow")["met"] == "no"
    assert _target(targets, name, "torch")["met"] == "n/a"


def test_positional_target_prefers_the_alternated_hub_time():
    # The kmodels case times the keras-hub model in alternation with it:
    # the target divides by that median, not by the hub case's own.
    results = [
        {"case": "transformer_hub", "backend": "jax", "median_ms": 100.0},
        {
            "case": "transformer_positional",
            "backend": "jax",
            "median_ms": 104.0,
            "hub_alternated_ms": 103.0,
        },
        {"case": "transformer_hub", "backend": "torch", "median_ms": 100.0},
        {
            "case": "transformer_positional",
            "backend": "torch",
            "median_ms": 104.0,
        },
    ]
    results = [dict(r, status="ok") for r in results]
    targets = report.evaluate_targets(results)
    jax_pos = _target(targets, "PositionalEmbedding", "jax")
    assert jax_pos["value"] == pytest.approx(104.0 / 103.0)
    # A result recorded before the alternation: the hub case's own time.
    torch_pos = _target(targets, "PositionalEmbedding", "torch")
    assert torch_pos["value"] == pytest.approx(1.04)


def test_decoding_ratios_divide_by_the_alternated_partner():
    """beam / greedy, top-k / greedy and constrained / beam divide by the
    partner timed in alternation in the same case when the record has it;
    older records: by the partner case's own median."""
    results = [
        {"case": "generate", "backend": "jax", "median_ms": 200.0},
        {"case": "generate_beam", "backend": "jax", "median_ms": 600.0},
        {
            "case": "generate_beam",
            "backend": "torch",
            "median_ms": 600.0,
            "greedy_alternated_ms": 250.0,
        },
        {"case": "generate", "backend": "torch", "median_ms": 150.0},
        {
            "case": "generate_top_k",
            "backend": "torch",
            "median_ms": 300.0,
            "greedy_alternated_ms": 240.0,
        },
        {
            "case": "generate_beam_constrained",
            "backend": "torch",
            "median_ms": 630.0,
            "beam_alternated_ms": 700.0,
        },
    ]
    results = [dict(r, status="ok") for r in results]
    targets = report.evaluate_targets(results)
    assert _target(targets, "Generation: beam search", "jax")["value"] == 3.0
    torch_beam = _target(targets, "Generation: beam search", "torch")
    assert torch_beam["value"] == pytest.approx(2.4)
    assert torch_beam["met"] == "yes"
    top_k = _target(targets, "Generation: top-k", "torch")
    assert top_k["value"] == pytest.approx(1.25) and top_k["met"] == "no"
    constrained = _target(targets, "Generation: beam + no-repeat", "torch")
    assert constrained["value"] == pytest.approx(0.9)


def test_format_cell():
    ok = report.derive(_ok("seq2seq_train", "jax", 200.0, flops=20e9))
    assert report.format_cell(ok) == "200 (180-220) ms, 100.0 GF/s"
    assert report.format_cell({"status": "n/a"}) == "n/a (not available)"
    assert report.format_cell({"status": "error"}) == "error"
    assert report.format_cell(None) == "-"
    small = report.derive(_ok("embedding_10k", "jax", 0.8))
    assert report.format_cell(small) == "0.80 (0.72-0.88) ms"


def _meta():
    return {
        "created": "2026-01-02 03:04 UTC",
        "quick": False,
        "command": "python -m benchmarks",
        "machine": {"cpu_count": 2},
        "versions": {"keras": "3.15.1"},
    }


def test_markdown_table_rows():
    results = _results()
    text = report.markdown(results, report.evaluate_targets(results), _meta())
    lines = text.splitlines()
    header = (
        "| workload | variant | numpy | tf_keras | tensorflow | jax | torch |"
    )
    assert header in lines
    assert (
        "| Seq2Seq train step | kmodels Translator | - | - | "
        "320 (288-352) ms, 62.5 GF/s | 200 (180-220) ms, 100.0 GF/s | "
        "250 (225-275) ms, 80.0 GF/s |"
    ) in lines
    assert (
        "| Transformer encoder train step | kmodels PositionalEmbedding | "
        "- | - | - | n/a (not available) | - |"
    ) in lines
    assert "Measured float32 matmul peak: 100.0 GFLOP/s." in lines
    # Cases with no record at all are left out of the table.
    assert not any("GrowableEmbedding" in line for line in lines[:20])


def test_update_docs_replaces_only_the_marked_section(tmp_path):
    path = tmp_path / "benchmarks.md"
    path.write_text(
        f"# Title\n\nbefore\n\n{report.DOCS_START}\nold table\n"
        f"{report.DOCS_END}\n\nafter\n"
    )
    report.update_docs(str(path), "new table\n")
    assert path.read_text() == (
        f"# Title\n\nbefore\n\n{report.DOCS_START}\nnew table\n"
        f"{report.DOCS_END}\n\nafter\n"
    )
    report.update_docs(str(path), "newer\n")
    assert path.read_text().count(report.DOCS_START) == 1


def test_update_docs_appends_markers_when_absent(tmp_path):
    path = tmp_path / "doc.md"
    path.write_text("# Doc\n")
    report.update_docs(str(path), "table\n")
    assert path.read_text() == (
        f"# Doc\n\n{report.DOCS_START}\ntable\n{report.DOCS_END}\n"
    )


def test_json_document_round_trip_and_schema(tmp_path):
    doc = report.document(_results(), dict(_meta(), quick=True))
    path = tmp_path / "r.json"
    report.write_json(doc, str(path))
    loaded = json.loads(path.read_text())
    assert loaded["schema_version"] == report.SCHEMA_VERSION
    assert loaded["peak_gflops"] == pytest.approx(100.0)
    assert len(loaded["results"]) == 15
    report.validate(loaded)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("targets"), "misses key 'targets'"),
        (lambda d: d.update(schema_version=0), "schema_version 1 expected"),
        (lambda d: d["results"][0].pop("median_ms"), "misses \\['median_ms'"),
        (lambda d: d["results"][0].update(status="odd"), "unknown status"),
    ],
)
def test_validate_rejects_bad_documents(mutate, message):
    doc = report.document(_results(), _meta())
    mutate(doc)
    with pytest.raises(ValueError, match=message):
        report.validate(doc)


def test_chart_writes_a_png(tmp_path):
    doc = report.document(_results(), _meta())
    path = tmp_path / "chart.png"
    report.chart(doc, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_json_checks_before_writing(tmp_path):
    path = tmp_path / "r.json"
    doc = report.document(_results(), _meta())
    del doc["targets"]
    with pytest.raises(ValueError, match="misses key 'targets'"):
        report.write_json(doc, str(path))
    assert not path.exists()

    def refuse(doc):
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        report.write_json({"any": 1}, str(path), check=refuse)
    assert not path.exists()
    report.write_json({"any": 1}, str(path), check=lambda doc: None)
    assert path.read_text() == '{\n "any": 1\n}\n'


def test_markdown_table_lines():
    assert report.markdown_table(("a", "b"), [["1", "2"], ["3", ""]]) == [
        "| a | b |",
        "|---|---|",
        "| 1 | 2 |",
        "| 3 |  |",
    ]


def test_docs_section_is_the_newest_committed_run():
    # The results section of docs/benchmarks.md is what `report.markdown`
    # makes of the newest run kept in benchmarks/results/: the committed
    # JSON still validates and renders to the same text.
    runs = [
        p
        for p in glob.glob(os.path.join(runner.RESULTS_DIR, "*.json"))
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}\.json", os.path.basename(p))
    ]
    with open(max(runs), encoding="utf-8") as f:
        doc = json.load(f)
    report.validate(doc)
    with open(runner.DOCS_PATH, encoding="utf-8") as f:
        text = f.read()
    start = text.index(report.DOCS_START) + len(report.DOCS_START) + 1
    section = text[start : text.index(report.DOCS_END)]
    assert report.markdown(doc["results"], doc["targets"], doc) == section


def test_eager_call_targets():
    # Issue 17: an eager call costs at most 3x predict_on_batch.
    results = [
        report.derive(r)
        for r in [
            _ok("eager_call_tiny", "jax", 1.2),
            _ok("predict_tiny", "jax", 0.6),
            _ok("eager_call_tiny", "torch", 35.0),
            _ok("predict_tiny", "torch", 7.0),
            _ok("eager_call", "tensorflow", 3.0),
        ]
    ]
    targets = report.evaluate_targets(results)
    jax_tiny = _target(
        targets, "Eager call / predict_on_batch time, tiny", "jax"
    )
    assert jax_tiny["value"] == pytest.approx(2.0) and jax_tiny["met"] == "yes"
    assert jax_tiny["goal"] == "<= 3"
    torch_tiny = _target(
        targets, "Eager call / predict_on_batch time, tiny", "torch"
    )
    assert torch_tiny["value"] == pytest.approx(5.0)
    assert torch_tiny["met"] == "no"
    # No predict measured: not evaluated.
    tf_full = _target(
        targets, "Eager call / predict_on_batch time, tutorial", "tensorflow"
    )
    assert tf_full["met"] == "n/a"


def test_export_target_binds_tensorflow_only():
    # Issue 44: TextTranslator.export <= 5 s where it runs in the process.
    results = [
        _ok("export_time", "tensorflow", 4200.0, first_call_ms=6100.0),
        _ok("export_time", "jax", 9000.0, first_call_ms=15000.0),
    ]
    targets = report.evaluate_targets(results)
    name = "TextTranslator.export, dates bundle (s)"
    tf_row = _target(targets, name, "tensorflow")
    assert tf_row["value"] == pytest.approx(4.2) and tf_row["met"] == "yes"
    assert tf_row["goal"] == "<= 5"
    assert tf_row["note"] == (
        "in this process; median of 5, first export 6.1 s"
    )
    jax_row = _target(targets, name, "jax")
    assert jax_row["value"] == pytest.approx(9.0) and jax_row["met"] == "info"
    assert _target(targets, name, "torch")["met"] == "n/a"
    slow = [_ok("export_time", "tensorflow", 5100.0, first_call_ms=1.0)]
    assert _target(report.evaluate_targets(slow), name, "tensorflow")[
        "met"
    ] == ("no")


def test_first_call_target_binds_jax_only():
    # Issue 44: a second process' first translate <= 3x its steady call.
    ratios = dict(
        translate_first_ratio=600.0,
        predict_first_ratio=250.0,
        predict_warm_first_ratio=120.0,
    )
    results = [
        _ok("first_call", "jax", 2.0, translate_warm_first_ratio=2.5, **ratios),
        _ok(
            "first_call",
            "torch",
            8.0,
            translate_warm_first_ratio=40.0,
            **ratios,
        ),
    ]
    targets = report.evaluate_targets(results)
    name = "First translate / steady, second process (warm cache)"
    jax_row = _target(targets, name, "jax")
    assert jax_row["value"] == 2.5 and jax_row["met"] == "yes"
    assert jax_row["goal"] == "<= 3"
    assert jax_row["note"] == (
        "fresh process 600x; predict_on_batch fresh 250x, warm 120x"
    )
    assert _target(targets, name, "torch")["met"] == "info"
    assert _target(targets, name, "tensorflow")["met"] == "n/a"
    slow = [
        _ok("first_call", "jax", 2.0, translate_warm_first_ratio=3.5, **ratios)
    ]
    assert _target(report.evaluate_targets(slow), name, "jax")["met"] == "no"


def test_import_target_binds_jax_and_torch():
    # Issue 44: import kmodels.seq2seq <= 1.3x import keras on JAX, torch.
    def record(backend, ratio, tensorflow):
        return _ok(
            "import_time",
            backend,
            3000.0,
            seq2seq_ratio=ratio,
            kmodels_ratio=1.01,
            seq2seq_loads_tensorflow=tensorflow,
            seq2seq_loads_keras_hub=False,
        )

    results = [
        record("jax", 1.1, False),
        record("torch", 1.4, False),
        record("tensorflow", 1.02, True),
    ]
    targets = report.evaluate_targets(results)
    name = "import kmodels.seq2seq / import keras, fresh process"
    jax_row = _target(targets, name, "jax")
    assert jax_row["value"] == 1.1 and jax_row["met"] == "yes"
    assert jax_row["goal"] == "<= 1.3"
    assert jax_row["note"] == (
        "import kmodels 1.01x; loads neither TensorFlow nor keras-hub"
    )
    assert _target(targets, name, "torch")["met"] == "no"
    tf_row = _target(targets, name, "tensorflow")
    assert tf_row["met"] == "info"
    assert tf_row["note"] == "import kmodels 1.01x; loads TensorFlow"


def test_shape_targets_bind_every_backend():
    # Issue 44: a new batch size or length <= 3x its own steady call; 12
    # max_length values <= 30 MB.
    results = [
        _ok(
            "new_shape",
            "jax",
            2.0,
            new_batch_ms=2500.0,
            new_batch_steady_ms=1.25,
            new_batch_ratio=2000.0,
            new_length_ms=6.0,
            new_length_steady_ms=3.0,
            new_length_ratio=2.0,
        ),
        _ok("max_length_memory", "tensorflow", 1500.0, rss_growth_mb=137.0),
        _ok("max_length_memory", "torch", 20.0, rss_growth_mb=0.5),
    ]
    targets = report.evaluate_targets(results)
    batch = _target(targets, "generate, first call of a new batch size", "jax")
    assert batch["value"] == 2000.0 and batch["met"] == "no"
    assert batch["goal"] == "<= 3"
    assert batch["note"] == "first 2.50 s, steady 1.2 ms"
    length = _target(targets, "generate, first call of a new length", "jax")
    assert length["value"] == 2.0 and length["met"] == "yes"
    assert _target(targets, "generate, first call of a new length", "torch")[
        "met"
    ] == ("n/a")
    name = "generate, resident memory over 12 max_length values (MB)"
    tf_row = _target(targets, name, "tensorflow")
    assert tf_row["value"] == 137.0 and tf_row["met"] == "no"
    assert tf_row["goal"] == "<= 30"
    assert tf_row["note"] == "first calls median 1.50 s"
    assert _target(targets, name, "torch")["met"] == "yes"


def test_eager_case_reports_first_call_and_memory():
    # The case itself, at its quick sizes, on this backend.
    from benchmarks import cases
    from benchmarks import eager

    sizes = cases.sizes_for(cases.CASES_BY_NAME["eager_call_tiny"], True)
    record = eager.eager_call(sizes, cases.timing_for(True))
    assert record["steps"] == 2
    assert record["first_call_ms"] > 0 and record["median_ms"] > 0
    assert isinstance(record["rss_growth_mb"], float)


def _costed(case, backend, median_ms, **extra):
    """An "ok" record of a new run: first call and peak memory measured."""
    return _ok(
        case,
        backend,
        median_ms,
        first_step_ms=2600.0 + median_ms,  # 2.60 s over the median
        peak_rss_mb=812.4,
        peak_rss_scope="case",
        rss_start_mb=300.0,
        **extra,
    )


def test_derive_adds_the_compile_time():
    record = report.derive(_costed("seq2seq_train", "jax", 200.0))
    assert record["compile_ms"] == pytest.approx(2600.0, rel=1e-12)
    # An eager case's own first-call time wins over `measure`'s.
    eager = report.derive(
        _ok("eager_call", "jax", 10.0, first_call_ms=510.0, first_step_ms=20.0)
    )
    assert eager["compile_ms"] == pytest.approx(500.0, rel=1e-12)
    assert "compile_ms" not in report.derive(_ok("x", "jax", 1.0))


def test_format_cost_cells():
    assert report.format_cost(_costed("x", "jax", 200.0)) == "2.60 s, 812 MB"
    # Old results: neither measured.
    assert report.format_cost(_ok("x", "jax", 200.0)) == "-"
    assert report.format_cost(None) == "-"
    assert report.format_cost({"status": "error", "peak_rss_mb": 9.0}) == "-"
    # One of the two: the other is "-".
    assert report.format_cost(_ok("x", "jax", 1.0, peak_rss_mb=99.6)) == (
        "-, 100 MB"
    )


def test_markdown_has_the_compile_and_memory_table():
    results = [
        report.derive(r)
        for r in [
            _costed("seq2seq_train", "jax", 200.0),
            _costed("seq2seq_train_original", "tf_keras", 400.0),
            _ok("seq2seq_train", "torch", 250.0),  # an older record
        ]
    ]
    text = report.markdown(results, report.evaluate_targets(results), _meta())
    lines = text.splitlines()
    assert report.COST_NOTE in lines
    assert (
        "| Seq2Seq train step | kmodels Translator | - | - | - | "
        "2.60 s, 812 MB | - |"
    ) in lines
    assert (
        "| Seq2Seq train step | tutorial Translator (tf.keras) | - | "
        "2.60 s, 812 MB | - | - | - |"
    ) in lines
    # No breakdown case in this run: no "where the time goes" table.
    assert report.BREAKDOWN_NOTE not in lines


def test_old_results_render_with_dashes():
    # A run recorded before the compile and memory columns existed.
    results = _results()
    text = report.markdown(results, report.evaluate_targets(results), _meta())
    lines = text.splitlines()
    assert (
        "| Seq2Seq train step | kmodels Translator | - | - | - | - | - |"
    ) in lines[lines.index(report.COST_NOTE) :]
    measurements, costs, targets = report.rich_tables(
        report.document(results, _meta())
    )
    assert costs.row_count == measurements.row_count


def _breakdown(backend, whole, **parts):
    return _ok(
        "seq2seq_breakdown",
        backend,
        whole,
        parts_ms=dict(parts),
        call_overhead_ms=0.1,
    )


def test_where_the_time_goes_table():
    results = [
        report.derive(
            _breakdown(
                "jax",
                200.0,
                recurrence_forward=50.0,
                projection_forward=20.0,
                loss_forward=10.0,
                backward=100.0,
                optimizer=20.0,
            )
        ),
        report.derive(
            _breakdown(
                "torch",
                100.0,
                recurrence_forward=60.0,
                projection_forward=10.0,
                loss_forward=5.0,
                backward=-5.0,
                optimizer=30.0,
            )
        ),
    ]
    rows = report.breakdown_rows(results)
    assert [row[0] for row in rows] == [
        label for _, label in report.BREAKDOWN_LABELS
    ] + ["whole train step"]
    # Columns: tensorflow (no record), jax, torch.
    assert rows[0][1:] == ["-", "50.0 ms (25%)", "60.0 ms (60%)"]
    assert rows[3][1:] == ["-", "100 ms (50%)", "-5.00 ms (-5%)"]
    assert rows[-1][1:] == ["-", "200 ms (100%)", "100 ms (100%)"]
    text = report.markdown(results, [], _meta())
    assert report.BREAKDOWN_NOTE in text
    assert "| part | tensorflow | jax | torch |" in text
    assert len(report.rich_tables(report.document(results, _meta()))) == 4
    assert report.breakdown_rows(_results()) == []


def test_mixed_precision_targets():
    results = [
        report.derive(r)
        for r in [
            _ok("seq2seq_train_original", "tf_keras", 400.0),
            _ok("seq2seq_train", "jax", 200.0),
            _ok("seq2seq_train_bf16", "jax", 600.0),
            _ok("dates_bf16", "jax", 180e3, exact_match=0.97),
            _ok("dates_bf16", "torch", 180e3, exact_match=0.5),
            _ok("dates_float32", "torch", 180e3, exact_match=0.99),
        ]
    ]
    targets = report.evaluate_targets(results)
    original = _target(
        targets, "Seq2Seq train: mixed_bfloat16 / float32 original", "jax"
    )
    assert original["value"] == pytest.approx(1.5)
    assert original["met"] == "info"
    own = _target(targets, "Seq2Seq train: mixed_bfloat16 / float32 t", "jax")
    assert own["value"] == pytest.approx(3.0) and own["met"] == "info"
    assert (
        _target(targets, "Seq2Seq train: mixed_bfloat16 / float32 t", "torch")[
            "met"
        ]
        == "n/a"
    )
    dates = _target(
        targets, "Dates demo: held-out exact match, mixed_bfloat16", "jax"
    )
    assert dates["value"] == 0.97 and dates["met"] == "yes"
    assert dates["goal"] == ">= 0.95"
    assert (
        _target(
            targets, "Dates demo: held-out exact match, mixed_bfloat16", "torch"
        )["met"]
        == "no"
    )
    reference = _target(
        targets, "Dates demo: held-out exact match, float32", "torch"
    )
    assert reference["met"] == "info"
    # A run without the opt-in dates cases has no dates rows.
    assert not any(
        t["target"].startswith("Dates") for t in report.evaluate_targets([])
    )
    cell = report.format_cell(results[3])
    assert cell == "exact match 0.970, trained 180 s"


def test_chart_skips_exact_match_cases(tmp_path):
    results = [
        report.derive(r)
        for r in [
            _ok("dates_bf16", "jax", 180e3, exact_match=0.97),
            _costed("seq2seq_train", "jax", 200.0),
        ]
    ]
    path = tmp_path / "chart.png"
    report.chart(report.document(results, _meta()), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    only_dates = tmp_path / "dates.png"
    report.chart(report.document(results[:1], _meta()), str(only_dates))
    assert only_dates.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
