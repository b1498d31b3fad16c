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


_MIRRORED = {}


def mirrored_strategy(replicas):
    """The session's `tf.distribute.MirroredStrategy` over `replicas`
    virtual CPUs (TensorFlow), one per replica count.

    A second MirroredStrategy over devices an earlier one uses can reuse
    its collective keys (both start at group key 1), and TensorFlow then
    fails with "Shape mismatch in the collective instance" or "joining a
    group with size 2, but that group has size 4". So every count but the
    session's device count runs its all-reduces and all-gathers without
    collectives (`ReductionToOneDevice`: copies to one device and back),
    and the device count's strategy keeps TensorFlow's default (collective
    ring all-reduce on CPUs)."""
    import tensorflow as tf

    if replicas not in _MIRRORED:
        devices = [f"/cpu:{i}" for i in range(replicas)]
        cross_device_ops = None
        if replicas != VIRTUAL_DEVICES:
            cross_device_ops = tf.distribute.ReductionToOneDevice()
        _MIRRORED[replicas] = tf.distribute.MirroredStrategy(
            devices, cross_device_ops=cross_device_ops
        )
    return _MIRRORED[replicas]
