"""The cross-backend comparison of kmodels.testing.parity (pure NumPy logic)."""

import numpy as np
import pytest

from kmodels.testing.parity import ParityStore
from kmodels.testing.parity import compare
from kmodels.testing.parity import format_table

pytestmark = pytest.mark.backend_independent(
    reason="the parity store compares NumPy arrays saved by each backend"
)


def _write(tmp_path, values):
    for backend, value in values.items():
        store = ParityStore(str(tmp_path), backend)
        store.record("x", np.asarray(value), atol=1e-6, rtol=1e-5)
        store.save()


def test_agreeing_backends_pass(tmp_path):
    base = np.array([1.0, -2.0, 3.0])
    _write(
        tmp_path,
        {"tensorflow": base, "jax": base + 1e-7, "torch": base - 1e-7},
    )
    rows, ok, missing = compare(str(tmp_path))
    assert ok and missing == []
    assert [r["pair"] for r in rows] == [
        "tensorflow vs jax",
        "tensorflow vs torch",
        "jax vs torch",
    ]
    np.testing.assert_allclose(rows[0]["max_abs"], 1e-7, rtol=1e-6)
    np.testing.assert_allclose(rows[2]["max_abs"], 2e-7, rtol=1e-6)


def test_difference_outside_tolerance_fails(tmp_path):
    base = np.array([1.0, 2.0])
    _write(
        tmp_path,
        {"tensorflow": base, "jax": base, "torch": base + [0.0, 1e-3]},
    )
    rows, ok, _ = compare(str(tmp_path))
    assert not ok
    assert [r["status"] for r in rows] == ["ok", "FAIL", "FAIL"]
    np.testing.assert_allclose(rows[1]["max_rel"], 1e-3 / 2.001, rtol=1e-6)
    assert "FAIL" in format_table(rows)


def test_missing_backend_fails(tmp_path):
    _write(tmp_path, {"tensorflow": [1.0], "jax": [1.0]})
    rows, ok, missing = compare(str(tmp_path))
    assert not ok and missing == ["torch"]
    assert all(r["status"] == "MISSING" for r in rows if "torch" in r["pair"])
