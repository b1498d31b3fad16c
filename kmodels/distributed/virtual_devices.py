"""Several CPU devices on one machine, to test distributed code anywhere."""

import importlib


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
        backend: `"jax"`, `"tensorflow"` or `"torch"`; defaults to
            `keras.backend.backend()`.

    Returns:
        The number of CPU devices the backend now exposes (1 on torch).

    Raises:
        RuntimeError: when the backend has already created its devices with
            a different count.

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
    if backend is None:
        import keras

        backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        return 1
    # The backend's own code lives in kmodels/backend/ (imported only here,
    # so that nothing starts the backend before the split).
    impl = importlib.import_module(f"kmodels.backend.virtual_devices_{backend}")
    return impl.virtual_cpu_devices(count)
