"""torch side of `kmodels.backend.virtual_devices`."""


def virtual_cpu_devices(count):
    # torch has no virtual devices: the process keeps its one CPU device.
    return 1
