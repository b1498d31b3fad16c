"""Each backend's data-parallel engine, as Keras drives it:
`keras.distribution.DataParallel` on JAX, `tf.distribute.MirroredStrategy`
on TensorFlow; torch has none (`unsupported_record` says why)."""

import functools

from benchmarks.child import NotAvailable

# The backends with a data-parallel engine that Keras drives, and the one it
# uses there.
ENGINES = {
    "jax": "keras.distribution.DataParallel",
    "tensorflow": "tf.distribute.MirroredStrategy",
}
TORCH_UNSUPPORTED = (
    "keras.distribution has no torch backend (Keras 3.15: "
    "keras.distribution.list_devices raises AttributeError) and "
    "tf.distribute is TensorFlow's; on torch use torch.distributed "
    "(DistributedDataParallel) outside Keras."
)


def unsupported_record(backend):
    """The record a backend without a data-parallel engine gets: status
    "n/a" and why (torch is the only one)."""
    return {
        "backend": backend,
        "workload": None,
        "devices": None,
        "status": "n/a",
        "error": TORCH_UNSUPPORTED,
    }


def _jax_engine(device_count):
    import keras

    devices = keras.distribution.list_devices("cpu")
    if len(devices) < device_count:
        raise RuntimeError(
            f"{device_count} CPU devices expected; JAX has {len(devices)}. "
            "Start the process with virtual_cpu_devices(n)."
        )
    distribution = keras.distribution.DataParallel(
        devices=devices[:device_count]
    )

    def train_step(model, x, y):
        # `train_on_batch` splits the global batch across the mesh and
        # returns Python floats: the step has finished when it returns.
        return lambda: model.train_on_batch(x, y)

    return distribution.scope(), train_step


@functools.cache
def _mirrored_strategy(device_count):
    import tensorflow as tf

    # One strategy per process and device count: two MirroredStrategy
    # objects number their collectives from the same keys, and TensorFlow
    # then mixes the second model's all-reduces up with the first's
    # ("Shape mismatch in the collective instance 102").
    return tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(device_count)]
    )


def _tensorflow_engine(device_count):
    import keras
    import tensorflow as tf

    found = len(tf.config.list_logical_devices("CPU"))
    if found < device_count:
        raise RuntimeError(
            f"{device_count} CPU devices expected; TensorFlow has {found}. "
            "Start the process with virtual_cpu_devices(n)."
        )
    strategy = _mirrored_strategy(device_count)

    def train_step(model, x, y):
        # `train_on_batch` would hand every replica the whole batch; what
        # `fit` does is split it with a distributed dataset, so each step
        # here pulls one global batch from such an iterator.
        global_batch = len(y)
        dataset = (
            tf.data.Dataset.from_tensor_slices((x, y))
            .repeat()
            .batch(global_batch, drop_remainder=True)
        )
        iterator = iter(strategy.experimental_distribute_dataset(dataset))
        with strategy.scope():
            model.optimizer.build(model.trainable_variables)
        model.make_train_function()

        def step():
            logs = model.train_function(iterator)
            return keras.ops.convert_to_numpy(logs["loss"])

        return step

    return strategy.scope(), train_step


def engine(backend, device_count):
    """`(scope, train_step)` of the backend's data-parallel engine over the
    first `device_count` CPU devices: build and compile the model inside
    `scope`, then `train_step(model, x, y)` returns a function running one
    blocking training step on the global batch `(x, y)`.

    Raises:
        NotAvailable: on a backend without one (torch).
    """
    if backend == "jax":
        return _jax_engine(device_count)
    if backend == "tensorflow":
        return _tensorflow_engine(device_count)
    raise NotAvailable(TORCH_UNSUPPORTED)
