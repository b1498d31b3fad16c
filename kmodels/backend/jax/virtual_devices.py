"""JAX side of `kmodels.backend.virtual_devices`."""

import os

import jax

_XLA_FLAG = "--xla_force_host_platform_device_count"


def virtual_cpu_devices(count):
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith(_XLA_FLAG)
    ]
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"{_XLA_FLAG}={count}"])
    if _backends_started():
        # Started already (the flag above came too late unless it was set
        # before): check the count. Not otherwise: reading the devices
        # would start the backend, and `jax.distributed.initialize` must
        # come before that (`import kmodels` imports JAX through Keras).
        found = len(jax.devices("cpu"))
        if found != count:
            raise RuntimeError(
                f"JAX already created {found} CPU device(s); virtual_cpu_"
                f"devices({count}) must run before JAX's first computation "
                f"(or set XLA_FLAGS={_XLA_FLAG}={count} before starting "
                "Python)."
            )
    return count


def _backends_started():
    try:
        from jax._src import xla_bridge

        return xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):  # another JAX: assume started
        return True
