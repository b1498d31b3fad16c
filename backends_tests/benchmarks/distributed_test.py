"""The scaling benchmark (`python -m benchmarks.distributed`): its plan of
batches and the speed-up arithmetic (`scaling`), the report (`report`), one
`--quick` configuration measured in this process on this backend (`child`,
`engines`) and the parent's subprocess plumbing (`runner`)."""

import glob
import json
import math
import os

import keras
import pytest

from benchmarks.child import NotAvailable
from benchmarks.distributed import child
from benchmarks.distributed import engines
from benchmarks.distributed import report
from benchmarks.distributed import runner
from benchmarks.distributed import scaling
from benchmarks.runner import RESULTS_DIR


def test_batches_follow_strong_and_weak_scaling():
    # Quick sizes: strong-scaling global batch 4, weak-scaling batch 1 per
    # device. One device also measures the weak baseline (batch 1).
    assert scaling.batches_for(["transformer"], 1, quick=True) == {
        "transformer": [1, 4]
    }
    assert scaling.batches_for(["seq2seq"], 2, quick=True) == {
        "seq2seq": [2, 4]
    }
    # On 4 devices both scalings run the same global batch: measured once.
    assert scaling.batches_for(["transformer"], 4, quick=True) == {
        "transformer": [4]
    }
    full = scaling.sizes_for("transformer", quick=False)
    assert scaling.global_batch(full, "weak", 4) == 4 * 8
    with pytest.raises(ValueError, match="'strong' or 'weak'; got 'both'"):
        scaling.global_batch(full, "both", 1)


def _record(devices, batch, median_ms, backend="jax"):
    return {
        "backend": backend,
        "workload": "transformer",
        "devices": devices,
        "global_batch": batch,
        "status": "ok",
        "median_ms": median_ms,
        "q1_ms": median_ms,
        "q3_ms": median_ms,
        "examples_per_s": batch / (median_ms / 1e3),
        "first_step_s": 1.0,
    }


def _synthetic_results():
    # Quick sizes (strong batch 4, weak 1 per device) on 1 and 2 devices.
    return [
        _record(1, 1, 50.0),  # weak baseline: 20 examples/s
        _record(1, 4, 100.0),  # strong baseline: 40 examples/s
        _record(2, 2, 80.0),  # weak, 2 devices: 25 examples/s
        _record(2, 4, 80.0),  # strong, 2 devices: 50 examples/s
        engines.unsupported_record("torch"),
    ]


def test_speedup_and_efficiency_are_examples_per_second_ratios():
    rows = scaling.scaling_rows(_synthetic_results(), 2, quick=True)
    got = {
        (r["scaling"], r["devices"]): (
            r["global_batch"],
            r["speedup"],
            r["efficiency"],
            r["ceiling"],
        )
        for r in rows
    }
    # Exact arithmetic on the numbers above; 1e-12 only absorbs float
    # rounding of the divisions.
    expected = {
        ("strong", 1): (4, 1.0, 1.0, 1),
        ("strong", 2): (4, 50 / 40, 50 / 40 / 2, 2),
        ("weak", 1): (1, 1.0, 1.0, 1),
        ("weak", 2): (2, 25 / 20, 25 / 20 / 2, 2),
    }
    assert sorted(got) == sorted(expected)
    for key, (batch, speedup, efficiency, ceiling) in expected.items():
        assert got[key][0] == batch and got[key][3] == ceiling, key
        assert got[key][1] == pytest.approx(speedup, rel=1e-12), key
        assert got[key][2] == pytest.approx(efficiency, rel=1e-12), key
    # The ceiling is the core count once the devices outnumber the cores.
    # A failed configuration shows as "error", with no speed-up.
    failed = _synthetic_results()
    failed[3] = dict(failed[3], status="error", error="boom")
    rows = scaling.scaling_rows(failed, 2, quick=True)
    strong_2 = [
        r for r in rows if (r["scaling"], r["devices"]) == ("strong", 2)
    ]
    assert [(r["status"], r["speedup"]) for r in strong_2] == [("error", None)]
    rows = scaling.scaling_rows([_record(4, 4, 10.0)], 2, quick=True)
    # Without a 1-device baseline there is no speed-up.
    assert [(r["scaling"], r["ceiling"], r["speedup"]) for r in rows] == [
        ("strong", 2, None),
        ("weak", 2, None),
    ]


def test_document_markdown_and_validation(tmp_path):
    doc = report.document(
        _synthetic_results(),
        quick=True,
        device_counts=[1, 2],
        workloads=["transformer"],
        command="python -m benchmarks.distributed --quick",
        wall_s=1.0,
    )
    stem = report.write(doc, str(tmp_path))
    saved = json.loads(open(stem + ".json").read())
    assert saved["machine"]["cpu_count"] >= 1
    assert saved["device_counts"] == [1, 2]
    assert len(saved["scaling"]) == 4
    text = open(stem + ".md").read()
    lines = text.splitlines()
    header = "| " + " | ".join(report.HEADERS) + " |"
    start = lines.index(header)
    # Header, separator, then one row per scaling and device count.
    assert len([line for line in lines[start:] if line.startswith("|")]) == 6
    assert "| jax | Transformer encoder | strong | 2 | 4 | 2 |" in text
    assert "| 1.25 | 62% | 2 |" in text  # speed-up, efficiency, ceiling
    assert "torch: no row. keras.distribution has no torch backend" in text
    assert f"same {saved['machine']['cpu_count']} CPU core(s)" in text
    assert report.ABOVE_CEILING not in text
    # A speed-up above min(devices, cores) is flagged, not shown as real.
    fast = _synthetic_results()
    fast[3] = _record(2, 4, 100.0 / 3)  # 3x the 1-device examples/s
    flagged = report.markdown(dict(doc, scaling=scaling.scaling_rows(
        fast, 2, quick=True)))  # fmt: skip
    assert "| 3.00* | 150% | 2 |" in flagged
    assert report.ABOVE_CEILING in flagged
    # A measurement that is not a positive finite number is refused.
    doc["results"][0] = dict(doc["results"][0], median_ms=math.nan)
    with pytest.raises(ValueError, match="median_ms must be a positive"):
        report.validate(doc)


def _device_count(backend):
    if backend == "jax":
        return len(keras.distribution.list_devices("cpu"))
    import tensorflow as tf

    return len(tf.config.list_logical_devices("CPU"))


def test_quick_configuration_on_this_backend(tmp_path):
    backend = keras.backend.backend()
    records = []
    if backend == "torch":
        # keras.distribution has no torch implementation: no engine, one
        # "n/a" record that says what to use instead.
        with pytest.raises(NotAvailable, match="no torch backend"):
            engines.engine("torch", 1)
        child.run("torch", 1, ["transformer"], {}, True,
                              records.append)  # fmt: skip
        assert records == [
            {
                "backend": "torch",
                "workload": None,
                "devices": None,
                "status": "n/a",
                "error": engines.TORCH_UNSUPPORTED,
            }
        ]
        assert "torch.distributed" in records[0]["error"]
        return
    # The devices this process has: 1 in the per-backend suites, 4 under
    # KMODELS_VIRTUAL_DEVICES=4. Global batch 4 splits evenly over both.
    devices = _device_count(backend)
    child.run(
        backend, devices, ["transformer"], {"transformer": [4]}, True,
        records.append,
    )  # fmt: skip
    (record,) = records
    assert record["status"] == "ok", record.get("error")
    assert (record["backend"], record["devices"], record["global_batch"]) == (
        backend,
        devices,
        4,
    )
    assert record["engine"] == engines.ENGINES[backend]
    assert record["per_device_batch"] == 4 // devices
    assert record["steps"] == scaling.QUICK_TIMING["max_steps"]
    for key in ("median_ms", "q1_ms", "q3_ms", "first_step_s"):
        assert math.isfinite(record[key]) and record[key] > 0, key
    assert record["q1_ms"] <= record["median_ms"] <= record["q3_ms"]
    # examples/s is the global batch over the median step time (float
    # rounding only).
    assert record["examples_per_s"] == pytest.approx(
        4 / (record["median_ms"] / 1e3), rel=1e-12
    )
    doc = report.document(
        records,
        quick=True,
        device_counts=[devices],
        workloads=["transformer"],
        command="test",
        wall_s=record["wall_s"],
    )
    report.write(doc, str(tmp_path))  # validates
    strong = [r for r in doc["scaling"] if r["scaling"] == "strong"]
    assert [(r["devices"], r["status"]) for r in strong] == [(devices, "ok")]


def test_child_process_plumbing(tmp_path):
    # A real child process (the torch one: it needs no Keras import, so this
    # costs well under a second on every backend) through the parent's
    # reader; then the whole command for torch, which starts no child.
    records = []
    runner.run_child("torch", 2, ["transformer"], True, 60.0,
                          records.append)  # fmt: skip
    assert records == [engines.unsupported_record("torch")]
    code = runner.main(
        ["--quick", "--backends", "torch", "--out", str(tmp_path)]
    )
    assert code == 0
    (path,) = tmp_path.glob("distributed-*.json")
    doc = json.loads(path.read_text())
    assert doc["results"] == [engines.unsupported_record("torch")]
    assert doc["scaling"] == []
    assert doc["device_counts"] == [1, 2, 4]
    assert doc["quick"] is True


@pytest.mark.parametrize(
    "path",
    sorted(glob.glob(os.path.join(RESULTS_DIR, "distributed-*.json"))),
    ids=os.path.basename,
)
def test_committed_results_still_validate_and_render(path):
    # Every run kept in benchmarks/results/ (the figures of
    # docs/distributed.md) is read by today's code: it validates, and the
    # Markdown written beside it is rebuilt from the JSON byte for byte.
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    report.validate(doc)
    with open(path[: -len(".json")] + ".md", encoding="utf-8") as f:
        assert report.markdown(doc) == f.read()
