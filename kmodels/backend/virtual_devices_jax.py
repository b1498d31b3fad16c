"""JAX side of `kmodels.distributed.virtual_cpu_devices`."""

import os
import sys

_XLA_FLAG = "--xla_force_host_platform_device_count"


def virtual_cpu_devices(count):
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith(_XLA_FLAG)
    ]
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"{_XLA_FLAG}={count}"])
    if "jax" in sys.modules:
        import jax

        # Reading the devices initialises the backend; with the flag set
        # first, it comes up with `count` CPU devices.
        found = len(jax.devices("cpu"))
        if found != count:
            raise RuntimeError(
                f"JAX already created {found} CPU device(s); virtual_cpu_"
                f"devices({count}) must run before JAX's first computation "
                f"(or set XLA_FLAGS={_XLA_FLAG}={count} before starting "
                "Python)."
            )
    return count
