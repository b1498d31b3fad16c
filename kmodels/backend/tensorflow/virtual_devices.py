"""TensorFlow side of `kmodels.backend.virtual_devices`."""

import tensorflow as tf


def virtual_cpu_devices(count):
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError as error:
        found = len(tf.config.list_logical_devices("CPU"))
        if found != count:
            raise RuntimeError(
                f"TensorFlow already created {found} CPU device(s); "
                f"virtual_cpu_devices({count}) must run before TensorFlow's "
                "first op."
            ) from error
    return len(tf.config.list_logical_devices("CPU"))
