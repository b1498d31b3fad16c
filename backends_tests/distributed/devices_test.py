"""The virtual CPU devices that the distributed tests run on."""

import keras
import pytest

from kmodels.distributed import virtual_cpu_devices


def test_backend_exposes_the_virtual_devices(device_count):
    backend = keras.backend.backend()
    if backend == "jax":
        devices = keras.distribution.list_devices()
        assert devices == [f"cpu:{i}" for i in range(device_count)]
    elif backend == "tensorflow":
        import tensorflow as tf

        found = tf.config.list_logical_devices("CPU")
        assert len(found) == device_count
    else:
        # torch has no virtual devices and keras.distribution has no torch
        # implementation: list_devices fails with an AttributeError.
        with pytest.raises(AttributeError, match="list_devices"):
            keras.distribution.list_devices()


def test_changing_the_count_after_start_up_is_refused(device_count):
    backend = keras.backend.backend()
    if backend == "torch":
        assert virtual_cpu_devices(device_count + 1) == 1
        return
    if backend == "tensorflow":
        # Running one op initialises TensorFlow's devices.
        keras.ops.add(1, 1)
    with pytest.raises(RuntimeError, match="already created 4 CPU device"):
        virtual_cpu_devices(device_count + 1)
    assert virtual_cpu_devices(device_count) == device_count
