"""The matmul floor of the Seq2Seq train step (issue 29): its list of
matrix products against a count written out by hand, the floor as FLOPs /
rate for injected rates (no timing), its column, per-shape table and target
row in the report; on the current backend, the timed product against NumPy
and the rate arithmetic under a fake clock."""

import numpy as np
import pytest

from benchmarks import flops
from benchmarks import matmul
from benchmarks import report
from benchmarks.report.targets import MATMUL_FLOOR_GOAL

# Tiny model sizes: batch, source length, target length, vocabulary, units.
B, S, T, V, U = 2, 3, 4, 7, 5


def _by_name():
    products = flops.seq2seq_train_products(B, S, T, V, U)
    names = [p["name"] for p in products]
    assert len(names) == len(set(names)), "product names must be unique"
    return {p["name"]: p for p in products}


def _expected():
    """`{name: (batch, m, k, n, count)}` written from the model: three GRUs
    (input width U, 3U gates), single-head attention of width U, the output
    Dense to V; each forward product `x (m, k) @ w (k, n)` with its input
    gradient `(m, n) @ (n, k)` and weight gradient `(k, m) @ (m, n)`."""
    expected = {}
    for gru, length in (
        ("encoder forward GRU", S),
        ("encoder backward GRU", S),
        ("decoder GRU", T),
    ):
        expected[f"{gru} input projection"] = (1, B * length, U, 3 * U, 1)
        expected[f"{gru} input projection: d input"] = (
            1,
            B * length,
            3 * U,
            U,
            1,
        )
        expected[f"{gru} input projection: d weight"] = (
            1,
            U,
            B * length,
            3 * U,
            1,
        )
        # h (B, U) @ U_r (U, 3U) at each step, and dz (B, 3U) @ U_r^T back.
        expected[f"{gru} recurrent step"] = (1, B, U, 3 * U, length)
        expected[f"{gru} recurrent step: d state"] = (1, B, 3 * U, U, length)
        # sum_t h_t^T dz_t as one (U, B*length) @ (B*length, 3U) product.
        expected[f"{gru} recurrent: d kernel"] = (1, U, B * length, 3 * U, 1)
    for name, rows in (
        ("query", B * T),
        ("key", B * S),
        ("value", B * S),
        ("output", B * T),
    ):
        base = f"attention {name} projection"
        expected[base] = (1, rows, U, U, 1)
        expected[f"{base}: d input"] = (1, rows, U, U, 1)
        expected[f"{base}: d weight"] = (1, U, rows, U, 1)
    # Per sequence: scores Q (T, U) @ K^T (U, S); dQ = dS (T, S) @ K (S, U);
    # dK = dS^T (S, T) @ Q (T, U). Weighted sum P (T, S) @ V (S, U);
    # dP = dO (T, U) @ V^T (U, S); dV = P^T (S, T) @ dO (T, U).
    expected["attention scores Q K^T"] = (B, T, U, S, 1)
    expected["attention scores: d Q"] = (B, T, S, U, 1)
    expected["attention scores: d K"] = (B, S, T, U, 1)
    expected["attention weighted sum P V"] = (B, T, S, U, 1)
    expected["attention weighted sum: d P"] = (B, T, U, S, 1)
    expected["attention weighted sum: d V"] = (B, S, T, U, 1)
    expected["output projection"] = (1, B * T, U, V, 1)
    expected["output projection: d input"] = (1, B * T, V, U, 1)
    expected["output projection: d weight"] = (1, U, B * T, V, 1)
    return expected  # fmt: skip


def test_products_and_flops_match_a_count_from_the_model_sizes():
    products = _by_name()
    expected = _expected()
    assert sorted(products) == sorted(expected)
    for name, (batch, m, k, n, count) in expected.items():
        p = products[name]
        assert (p["batch"], p["m"], p["k"], p["n"], p["count"]) == (
            batch, m, k, n, count
        ), name  # fmt: skip
        assert p["flops"] == 2 * batch * m * k * n * count, name
    # Dense, forward and backward: 3 x the forward count, written out:
    # GRUs 2 (B S + B S + B T) 3U (U + U), attention projections
    # 2 U^2 (2 B T + 2 B S), scores and weighted sum 4 B T S U, Dense
    # 2 B T U V.
    forward = (
        2 * (B * S + B * S + B * T) * 3 * U * 2 * U
        + 2 * U * U * (2 * B * T + 2 * B * S)
        + 4 * B * T * S * U
        + 2 * B * T * U * V
    )
    total = sum(p["flops"] for p in products.values())
    assert total == 3 * forward == 25_320
    assert total == flops.seq2seq_train_step(B, S, T, V, U)


def test_floor_is_the_sum_of_flops_over_rates():
    products = flops.seq2seq_train_products(B, S, T, V, U)
    # A made-up rate per shape: 1 GFLOP/s per unit of m.
    rates = {flops.shape_of(p): float(p["m"]) for p in products}
    expected_ms = sum(
        2 * b * m * k * n * c / (m * 1e9) * 1e3
        for (b, m, k, n, c) in _expected().values()
    )
    assert flops.matmul_floor_ms(products, rates) == pytest.approx(
        expected_ms, rel=1e-12
    )
    seen = []

    def rate(shape):
        seen.append(shape)
        return rates[shape]

    floor_ms, table = matmul.matmul_floor(products, rate=rate)
    assert floor_ms == pytest.approx(expected_ms, rel=1e-12)
    # Each distinct shape timed once; the table has one row per shape, the
    # costliest first, and its rows add up to the floor and the FLOPs.
    assert len(seen) == len(set(seen)) == len(table)
    assert {tuple(row["shape"]) for row in table} == set(seen)
    assert [row["ms"] for row in table] == sorted(
        (row["ms"] for row in table), reverse=True
    )
    assert sum(row["ms"] for row in table) == pytest.approx(floor_ms)
    assert sum(row["flops"] for row in table) == 25_320
    # (1, U, B*S, 3U) is the input projections' and the recurrent kernels'
    # weight gradient shape of the two encoder GRUs: 4 products.
    (row,) = [r for r in table if r["shape"] == [1, U, B * S, 3 * U]]
    assert row["products"] == 4
    assert row["flops"] == 4 * 2 * U * B * S * 3 * U
    assert row["gflops"] == U


def _ok(case, backend, median_ms, **extra):
    return report.derive(
        dict(
            case=case,
            backend=backend,
            status="ok",
            median_ms=median_ms,
            q1_ms=median_ms,
            q3_ms=median_ms,
            min_ms=median_ms,
            max_ms=median_ms,
            steps=5,
            **extra,
        )
    )


def _run():
    return [
        _ok("seq2seq_train_original", "tf_keras", 400.0),
        _ok("seq2seq_train", "tensorflow", 300.0, matmul_floor_ms=200.0),
        _ok("seq2seq_train", "jax", 250.0, matmul_floor_ms=220.0),
        _ok("seq2seq_train", "torch", 320.0),
    ]


def test_report_shows_step_over_floor_and_the_target():
    results = _run()
    assert report.format_cell(results[2]) == (
        "250 (250-250) ms, 1.14x matmul floor"
    )
    # No floor recorded (older runs, other cases): no column text.
    assert "floor" not in report.format_cell(results[3])
    targets = report.evaluate_targets(results)
    (row,) = [t for t in targets if "matmul floor" in t["target"]]
    # The best backend is JAX (400 / 250 = 1.6x the original).
    assert row["backend"] == "jax"
    assert row["value"] == pytest.approx(250.0 / 220.0)
    assert row["goal"] == f"<= {MATMUL_FLOOR_GOAL:g}" == "<= 1.25"
    assert row["met"] == "yes"
    results[2] = _ok("seq2seq_train", "jax", 250.0, matmul_floor_ms=180.0)
    (row,) = [
        t
        for t in report.evaluate_targets(results)
        if "matmul floor" in t["target"]
    ]
    assert row["value"] == pytest.approx(250.0 / 180.0)
    assert row["met"] == "no"
    # Without the original's record: still the fastest backend's step.
    (row,) = [
        t
        for t in report.evaluate_targets(results[1:])
        if "matmul floor" in t["target"]
    ]
    assert (row["backend"], row["met"]) == ("jax", "no")
    # The fastest backend without a floor: "n/a", not another backend's.
    faster_torch = results[1:3] + [_ok("seq2seq_train", "torch", 100.0)]
    (row,) = [
        t
        for t in report.evaluate_targets(faster_torch)
        if "matmul floor" in t["target"]
    ]
    assert (row["backend"], row["value"], row["met"]) == ("torch", None, "n/a")
    meta = {
        "created": "2026-12-03 01:00",
        "quick": False,
        "command": "python -m benchmarks",
        "machine": {"cpu_count": 2},
        "versions": {"keras": "3"},
    }
    text = report.markdown(results, report.evaluate_targets(results), meta)
    assert "250 (250-250) ms, 1.39x matmul floor" in text
    assert "| Seq2Seq train: best step / its matmul floor | jax | 1.39 |" in (
        text
    )


def test_backend_matmul_is_the_product_numpy_computes():
    import keras

    rng = np.random.default_rng(1)
    for lead in ((), (3,)):
        a = rng.standard_normal(lead + (4, 5)).astype("float32")
        b = rng.standard_normal(lead + (5, 6)).astype("float32")
        got = matmul.backend_matmul()(
            keras.ops.convert_to_tensor(a), keras.ops.convert_to_tensor(b)
        )
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(got), a @ b, rtol=1e-5, atol=1e-5
        )


def test_shape_rate_is_flops_over_the_time_per_call():
    # A fake clock that advances 1 ms per reading: each warm-up product
    # "takes" 1 ms, so a 3 ms timing runs 3 calls between two readings
    # 1 ms apart: 1/3 ms per product of 2 * 2*3*4*5 = 240 FLOPs.
    ticks = iter(range(1000))

    def clock():
        return next(ticks) * 1e-3

    rate = matmul.shape_rate((2, 3, 4, 5), reps=3, min_ms=3.0, clock=clock)
    assert rate == pytest.approx(240 / (1e-3 / 3) / 1e9, rel=1e-9)
    # 2 warm-up calls (2 readings each), then 3 timings (2 readings each).
    assert next(ticks) == 10


def test_report_has_the_floor_table_per_shape():
    shapes = [
        {"shape": [1, 8, 4, 6], "products": 3, "flops": 1152,
         "gflops": 2.0, "ms": 5.76e-4},
        {"shape": [2, 3, 5, 7], "products": 1, "flops": 420,
         "gflops": 4.0, "ms": 1.05e-4},
    ]  # fmt: skip
    results = _run()
    results[2] = _ok(
        "seq2seq_train", "jax", 250.0, matmul_floor_ms=200.0,
        matmul_floor=shapes,
    )  # fmt: skip
    rows = report.floor_rows(results)
    assert rows == [
        ["8 x 4 @ 4 x 6", "3", "-", "2.0 GF/s, 0.00 ms", "-"],
        ["2 x (3 x 5 @ 5 x 7)", "1", "-", "4.0 GF/s, 0.00 ms", "-"],
        ["whole floor (step / floor)", "", "200 ms (1.50x)",
         "200 ms (1.25x)", "-"],
    ]  # fmt: skip
    meta = {
        "created": "2026-12-03 01:00",
        "quick": False,
        "command": "python -m benchmarks",
        "machine": {"cpu_count": 2},
        "versions": {"keras": "3"},
    }
    text = report.markdown(results, report.evaluate_targets(results), meta)
    assert report.FLOOR_NOTE in text
    assert "| 2 x (3 x 5 @ 5 x 7) | 1 | - | 4.0 GF/s, 0.00 ms | - |" in text
    # A run without floors (every committed run before issue 29): no table.
    assert report.floor_rows(_run()[:1] + _run()[3:]) == []
