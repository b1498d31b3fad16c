"""Subprocess plan and environment of the benchmark runner, the child's
error handling, and one `--quick` case end to end on this backend."""

import json
import os
import subprocess
import sys
import types

import keras
import pytest

from benchmarks import cases
from benchmarks import child
from benchmarks import runner


def test_child_env_fixes_backend_and_drops_slow_blas_settings():
    base = {
        "OPENBLAS_CORETYPE": "x",
        "OPENBLAS_L2_SIZE": "1",
        "KERAS_BACKEND": "jax",
        "TF_USE_LEGACY_KERAS": "1",
        "PATH": "/bin",
    }
    env = runner.child_env("torch", base)
    assert env["KERAS_BACKEND"] == "torch"
    assert "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env
    assert "TF_USE_LEGACY_KERAS" not in env
    assert env["PATH"] == "/bin"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == runner.ROOT
    legacy = runner.child_env("tf_keras", base)
    assert legacy["KERAS_BACKEND"] == "tensorflow"
    assert legacy["TF_USE_LEGACY_KERAS"] == "1"
    # The caller's environment is not modified.
    assert base["OPENBLAS_CORETYPE"] == "x"


def test_plan_isolation_levels():
    selected = runner.select_cases("bigru_unmasked,bigru_masked*,seq2seq_train")
    assert [c.name for c in selected] == [
        "seq2seq_train",
        "bigru_unmasked",
        "bigru_masked_keras",
        "bigru_masked",
    ]
    by_workload = runner.plan(selected, ["jax", "torch"], "workload")
    assert by_workload == [
        ("jax", ["seq2seq_train"]),
        ("jax", ["bigru_unmasked", "bigru_masked_keras", "bigru_masked"]),
        ("torch", ["seq2seq_train"]),
        ("torch", ["bigru_unmasked", "bigru_masked_keras", "bigru_masked"]),
    ]
    assert len(runner.plan(selected, ["jax", "torch"], "case")) == 8
    assert runner.plan(selected, ["jax"], "backend") == [
        ("jax", [c.name for c in selected])
    ]
    # Originals run only on the tf_keras pseudo-backend.
    originals = runner.select_cases("*_original")
    assert runner.plan(originals, ["jax"], "backend") == []


def test_opt_in_cases_run_only_when_named():
    default = [c.name for c in runner.select_cases("")]
    assert "dates_bf16" not in default and "dates_float32" not in default
    assert "export_time" not in default and "first_call" not in default
    assert "import_time" not in default and "new_shape" not in default
    assert "max_length_memory" not in default
    assert "seq2seq_train_bf16" in default and "seq2seq_breakdown" in default
    assert [c.name for c in runner.select_cases("dates*")] == [
        "dates_float32",
        "dates_bf16",
    ]


def test_select_cases_rejects_unknown_names():
    with pytest.raises(SystemExit, match="matches no case"):
        runner.select_cases("nope")


def test_exclude_leaves_cases_out_and_rejects_unknown_globs():
    chosen = runner.select_cases("bigru*", "bigru_masked*")
    assert [c.name for c in chosen] == ["bigru_original", "bigru_unmasked"]
    default = [c.name for c in runner.select_cases("", "growth_event")]
    assert "growth_event" not in default and "embedding_10k" in default
    with pytest.raises(SystemExit, match="--exclude 'nope' matches no case"):
        runner.select_cases("", "nope")


@pytest.mark.backend_independent(reason="a scan of tox.ini and test files")
def test_bench_leaves_out_only_cases_tested_on_every_backend():
    # tox's `bench` smoke run leaves out cases that this folder's tests run
    # on every backend (in each backend's own environment): each one it
    # names must be run here by name, on the test's backend.
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    with open(os.path.join(root, "tox.ini")) as f:
        (line,) = [line for line in f if "-m benchmarks --quick" in line]
    excluded = line.split("--exclude ")[1].split()[0].split(",")
    assert excluded, line
    here = os.path.dirname(__file__)
    sources = ""
    for name in sorted(os.listdir(here)):
        if name.endswith("_test.py"):
            with open(os.path.join(here, name)) as f:
                sources += f.read()
    for name in excluded:
        assert name in cases.CASES_BY_NAME
        assert set(cases.CASES_BY_NAME[name].backends) == set(
            cases.KERAS_BACKENDS
        ), name
        assert f'cases.CASES_BY_NAME["{name}"]' in sources, name
    assert sources.count("child._run_case(case, backend, quick=True)") >= len(
        excluded
    )


def test_docs_are_updated_only_by_full_runs():
    assert runner.docs_path_for(False, None, False, True) == runner.DOCS_PATH
    assert runner.docs_path_for(True, None, False, True) is None
    assert runner.docs_path_for(False, None, False, False) is None
    assert runner.docs_path_for(True, "x.md", False, True) == "x.md"
    assert runner.docs_path_for(False, "x.md", True, True) is None


def test_every_case_has_sizes_and_a_function():
    for case in cases.CASES:
        assert (
            case.sizes in cases.FULL_SIZES and case.sizes in cases.QUICK_SIZES
        )
        assert set(case.backends) <= set(cases.ALL_BACKENDS)
        module, _, function = case.function.partition(":")
        assert module.startswith("benchmarks.") and function


def _fake_case(monkeypatch, function):
    module = types.ModuleType("fake_benchmark_module")
    module.run = function
    monkeypatch.setitem(sys.modules, "fake_benchmark_module", module)
    return cases.Case(
        "fake", "Fake", "fake", ("jax",), "fake_benchmark_module:run", "matmul"
    )


def test_child_reports_missing_code_as_not_available(monkeypatch):
    def run(sizes, timing):
        child.require("kmodels.no_such_module", "Thing")

    record = child._run_case(_fake_case(monkeypatch, run), "numpy", True)
    assert record["status"] == "n/a"
    assert "kmodels.no_such_module.Thing not available" in record["error"]


@pytest.mark.backend_independent(
    reason="a fresh child process on the numpy pseudo-backend (no Keras "
    "backend in it); 8 s on TensorFlow"
)
def test_child_process_reports_missing_code_as_not_available(tmp_path):
    # `python -m benchmarks.child` runs the module as `__main__`, while the
    # workload modules raise `benchmarks.child.NotAvailable`: the process
    # must still report such a case "n/a", not "error". runpy runs the
    # module as `-m` does, after adding a case whose code is missing.
    (tmp_path / "fake_benchmark_case.py").write_text(
        "from benchmarks.child import require\n\n\n"
        "def run(sizes, timing):\n"
        "    require('kmodels.no_such_module', 'Thing')\n"
    )
    script = (
        "import runpy, sys\n"
        "from benchmarks import cases\n"
        "cases.CASES_BY_NAME['fake'] = cases.Case('fake', 'Fake', 'fake',"
        " ('numpy',), 'fake_benchmark_case:run', 'matmul')\n"
        "sys.argv = ['child', '--backend', 'numpy', '--cases', 'fake',"
        " '--quick']\n"
        "runpy.run_module('benchmarks.child', run_name='__main__')\n"
    )
    env = runner.child_env("numpy")
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=runner.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [
        line
        for line in done.stdout.splitlines()
        if line.startswith(child.PREFIX)
    ]
    record = json.loads(line[len(child.PREFIX) :])
    assert (record["case"], record["status"]) == ("fake", "n/a")
    assert "kmodels.no_such_module.Thing not available" in record["error"]


def test_child_reports_failures_without_stopping(monkeypatch):
    def run(sizes, timing):
        raise ValueError("boom")

    record = child._run_case(_fake_case(monkeypatch, run), "numpy", True)
    assert record["status"] == "error"
    assert record["error"] == "ValueError: boom"


def test_quick_case_on_this_backend():
    # In this process (Keras is already imported): the real workload code.
    backend = keras.backend.backend()
    case = cases.CASES_BY_NAME["embedding_10k"]
    record = child._run_case(case, backend, quick=True)
    assert record["status"] == "ok", record.get("error")
    assert (record["case"], record["backend"]) == ("embedding_10k", backend)
    assert record["steps"] == cases.QUICK_TIMING["max_steps"]
    assert record["q1_ms"] <= record["median_ms"] <= record["q3_ms"]
    # The first call (compilation) is timed apart; peak memory per case.
    assert record["first_step_ms"] > 0
    assert record["peak_rss_mb"] >= record["rss_start_mb"] > 0
    assert record["peak_rss_scope"] in ("case", "process")


@pytest.mark.usefixtures("no_first_reserve")
def test_quick_growth_event_on_this_backend():
    # The growth case through `kmodels.callbacks.EmbeddingGrowth` in
    # `fit`: each timed growth fit adds rows (the case raises otherwise).
    backend = keras.backend.backend()
    case = cases.CASES_BY_NAME["growth_event"]
    record = child._run_case(case, backend, quick=True)
    assert record["status"] == "ok", record.get("error")
    capacities = record["capacities"]
    assert capacities[0] == cases.QUICK_SIZES[case.sizes]["rows"]
    assert all(b > a for a, b in zip(capacities, capacities[1:]))
    assert record["growth_cost_ms"] == pytest.approx(
        record["median_ms"] - record["steady_median_ms"], rel=1e-12
    )
    # Where the time goes: each part lies within its growth fit (so do
    # their medians); on JAX the step is traced and compiled again for the
    # new shapes, elsewhere no compilation is measured.
    assert 0 < record["grow_ms"] <= record["median_ms"]
    # One growth per fit: on JAX the first (100 -> 200 rows) sets a
    # reserve of 800 rows that the next growth fits in; elsewhere each
    # recompiles.
    growths = len(capacities) - 1
    assert record["recompilations"] == (1 if backend == "jax" else growths)
    if backend == "jax":
        # Two growth fits, the first compiled: their median (mean) > 0.
        assert record["trace_ms"] > 0 and record["compile_ms"] > 0
        assert record["trace_ms"] + record["compile_ms"] <= record["median_ms"]
    else:
        assert record["trace_ms"] is None and record["compile_ms"] is None
    # Growth within the reserve, one round in a quick run: two growths,
    # each a ratio of two timed first batches (positive; the earlier
    # difference of whole fits went below 0 with noise).
    assert record["reserve_growths"] == 2
    assert all(r > 0 for r in record["reserve_step_ratios"])
    assert record["reserve_recompiled"] == (0 if backend == "jax" else 2)


def test_quick_run_end_to_end_in_a_subprocess(tmp_path):
    # The NumPy matmul case: a real child process and the whole report
    # pipeline, without paying for a Keras import in the child.
    code = runner.main(
        [
            "--quick",
            "--backends",
            "numpy",
            "--cases",
            "matmul_numpy",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    (json_path,) = tmp_path.glob("*.json")
    doc = json.loads(json_path.read_text())
    assert doc["quick"] is True
    # The XLA settings the children inherited are on record (tox's test
    # environments set some, see tox.ini).
    assert doc["xla_flags"] == os.environ.get("XLA_FLAGS", "")
    (record,) = doc["results"]
    assert (record["case"], record["backend"]) == ("matmul_numpy", "numpy")
    assert record["status"] == "ok"
    assert record["steps"] == cases.QUICK_TIMING["max_steps"]
    # 2 n^3 FLOPs for the quick size n.
    assert record["flops"] == 2 * cases.QUICK_SIZES["matmul"]["n"] ** 3
    assert record["gflops"] > 0
    (png,) = tmp_path.glob("*.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_child_env_threads_option():
    env = runner.child_env("jax", {"XLA_FLAGS": "--a"}, threads=1)
    assert all(env[name] == "1" for name in runner.THREAD_VARIABLES)
    assert env["XLA_FLAGS"] == "--a --xla_cpu_multi_thread_eigen=false"
    two = runner.child_env("torch", {}, threads=2)
    assert two["OMP_NUM_THREADS"] == "2" and "XLA_FLAGS" not in two
    # By default every library keeps its own thread-pool choice.
    default = runner.child_env("torch", {})
    assert not any(name in default for name in runner.THREAD_VARIABLES)


def test_a_child_past_its_timeout_reports_timeout_not_error():
    # A child that cannot finish in 0.5 s (it imports Keras first): every
    # case it did not report says "timeout", with the reason.
    records = []
    runner.run_group(
        keras.backend.backend(),
        ["embedding_10k", "matmul_keras"],
        quick=True,
        timeout=0.5,
        on_result=records.append,
    )
    assert [(r["case"], r["status"]) for r in records] == [
        ("embedding_10k", "timeout"),
        ("matmul_keras", "timeout"),
    ]
    assert records[0]["error"].startswith("ran past the 0 s timeout")
    assert runner.report.format_cell(records[0]) == "timeout"


def test_full_runs_warn_when_xla_optimises_otherwise():
    slow = {"XLA_FLAGS": "--a --xla_backend_optimization_level=0"}
    message = runner.xla_flags_warning(False, slow)
    assert message.startswith(
        "XLA_FLAGS sets --xla_backend_optimization_level "
        "('--a --xla_backend_optimization_level=0')"
    )
    assert message.endswith("unset it")
    both = {
        "XLA_FLAGS": "--xla_backend_optimization_level=0 "
        "--xla_cpu_use_fusion_emitters=false"
    }
    assert runner.xla_flags_warning(False, both).startswith(
        "XLA_FLAGS sets --xla_backend_optimization_level, "
        "--xla_cpu_use_fusion_emitters ("
    )
    emitters = {"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=false"}
    assert runner.xla_flags_warning(False, emitters).startswith(
        "XLA_FLAGS sets --xla_cpu_use_fusion_emitters ("
    )
    # Quick runs (nothing kept) and other flags: no warning.
    assert runner.xla_flags_warning(True, slow) is None
    assert runner.xla_flags_warning(False, {"XLA_FLAGS": "--a"}) is None
    assert runner.xla_flags_warning(False, {}) is None
