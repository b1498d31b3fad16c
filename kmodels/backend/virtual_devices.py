"""Several CPU devices in one process (`kmodels.distributed`)."""

import keras

from kmodels.backend import native_function


def virtual_cpu_devices(count, backend=None):
    """Splits the host CPU into `count` devices; returns the number of CPU
    devices the backend now exposes.

    JAX: sets `XLA_FLAGS=--xla_force_host_platform_device_count=count`
    without starting JAX's backends (`jax.distributed.initialize` must come
    first), and checks the count only if they have started. TensorFlow:
    `count` logical CPU devices. torch: nothing; returns 1. Raises a
    `RuntimeError` when the backend already created another count, and a
    `ValueError` when `backend` (optional) is not the running backend.
    """
    if backend is not None and backend != keras.backend.backend():
        raise ValueError(
            f"virtual_cpu_devices(backend={backend!r}): Keras runs the "
            f"{keras.backend.backend()!r} backend; set KERAS_BACKEND="
            f"{backend} before Keras is imported."
        )
    split = native_function("virtual_devices", "virtual_cpu_devices")
    # torch has no virtual devices: the process keeps its one CPU device.
    return 1 if split is None else split(count)
