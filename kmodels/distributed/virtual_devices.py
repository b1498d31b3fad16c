"""Several CPU devices on one machine, to test distributed code anywhere."""

from kmodels.backend import virtual_devices


def virtual_cpu_devices(count, backend=None):
    """Splits the host CPU into `count` devices for the current process.

    Distributed code (`keras.distribution` on JAX, `tf.distribute` on
    TensorFlow) can then be run and tested on a laptop or a CI runner: each
    virtual device is a real XLA (JAX) or TensorFlow CPU device, with its own
    buffers and real collectives between them, but they all share the same
    cores, so they show correctness and communication, not speed-up.

    Must be called before the backend creates its devices: before `jax` runs
    its first computation, before TensorFlow runs its first op. Setting
    `XLA_FLAGS=--xla_force_host_platform_device_count=N` in the environment
    has the same effect on JAX. torch has no equivalent; this is a no-op
    there (see `docs/distributed.md`).

    Args:
        count: int >= 1. Number of CPU devices.
        backend: `None` or the name of the running Keras backend
            (`"jax"`, `"tensorflow"` or `"torch"`), for a script that
            states the backend it expects.

    Returns:
        The number of CPU devices the backend now exposes (1 on torch).

    Raises:
        RuntimeError: when the backend has already created its devices with
            a different count.
        ValueError: when `backend` names another backend than the one
            Keras runs (`KERAS_BACKEND` decides it, before Keras starts).

    Example:

    ```python
    import os
    os.environ["KERAS_BACKEND"] = "jax"
    from kmodels.distributed import virtual_cpu_devices
    virtual_cpu_devices(4)
    import keras
    keras.distribution.list_devices()  # ['cpu:0', 'cpu:1', 'cpu:2', 'cpu:3']
    ```
    """
    count = int(count)
    if count < 1:
        raise ValueError(f"count must be >= 1; got {count}.")
    return virtual_devices.virtual_cpu_devices(count, backend)
