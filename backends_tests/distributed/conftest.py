"""Fixtures for the multi-device tests (`tox -e distributed`).

The top-level conftest has already split the CPU into
`$KMODELS_VIRTUAL_DEVICES` devices (JAX, TensorFlow) before the backend
started; torch has no virtual devices (see `docs/distributed.md`).
"""

import os

import keras
import numpy as np
import pytest

VIRTUAL_DEVICES = int(os.environ.get("KMODELS_VIRTUAL_DEVICES") or 0)


@pytest.fixture(scope="session")
def device_count():
    """The number of virtual CPU devices this session asked for."""
    if VIRTUAL_DEVICES < 2:
        pytest.fail(
            "the distributed tests need several devices: run them with "
            "KMODELS_VIRTUAL_DEVICES=4 (tox -e distributed); got "
            f"KMODELS_VIRTUAL_DEVICES={VIRTUAL_DEVICES or '<unset>'}."
        )
    return VIRTUAL_DEVICES


def weights_of(model):
    """Every variable of `model` (trainable or not) as float64 NumPy, keyed
    by path, so two models built the same way compare name by name."""
    return {
        v.path: np.asarray(keras.ops.convert_to_numpy(v.value), np.float64)
        for v in model.variables
    }


def max_abs_difference(a, b):
    """Largest absolute difference over the variables of two `weights_of`
    dicts (which must hold the same paths and shapes)."""
    assert sorted(a) == sorted(b)
    for path in a:
        assert a[path].shape == b[path].shape, path
    return max(float(np.max(np.abs(a[p] - b[p]), initial=0.0)) for p in a)
