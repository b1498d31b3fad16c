"""One process of a multi-process JAX data-parallel run (or the reference).

Launched by `multi_process_test.py`, once per process, the way a user
launches one process per host:

    python jax_worker.py OUT.npz --num-processes 2 --process-id 0 \
        --coordinator localhost:PORT --local-devices 2

`--num-processes 1 --local-devices 1` is the single-device reference (no
`keras.distribution` at all). Writes the trained weights and what the
process saw to OUT.npz.
"""

import argparse
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--coordinator", default=None)
    parser.add_argument("--local-devices", type=int, default=1)
    args = parser.parse_args()

    from kmodels.distributed import virtual_cpu_devices

    # Before JAX starts: this process's own CPU devices.
    virtual_cpu_devices(args.local_devices, backend="jax")

    import jax
    import keras
    import numpy as np
    import tiny_task

    if args.num_processes > 1:
        # jax.distributed.initialize underneath; on CPU the cross-process
        # collectives are gloo (jax_cpu_collectives_implementation's
        # default in jax 0.10).
        keras.distribution.initialize(
            args.coordinator, args.num_processes, args.process_id
        )
    record = {
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "global_devices": len(jax.devices()),
        "local_devices": jax.local_device_count(),
        "keras_devices": np.array(keras.distribution.list_devices()),
    }
    x, y = tiny_task.data()
    global_batch = tiny_task.GLOBAL_BATCH

    def compiled_model():
        model = tiny_task.build_model()
        model.compile(
            optimizer=keras.optimizers.SGD(tiny_task.LEARNING_RATE),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        return model

    def save(prefix, model):
        # The variables are replicated over every process's devices; a
        # process reads the global array like a local one.
        for path, value in tiny_task.trainable_weights(model).items():
            record[f"{prefix}/{path}"] = value

    if args.num_processes == 1:
        model = compiled_model()
        save("initial", model)
        model.fit(
            x, y, batch_size=global_batch, epochs=1, shuffle=False, verbose=0
        )
        save("reference", model)
        np.savez(args.out, **record)
        return

    import tensorflow as tf

    distribution = keras.distribution.DataParallel()
    record["mesh_shape"] = np.array(distribution.device_mesh.shape)
    keras.distribution.set_distribution(distribution)
    model = compiled_model()
    # One model, trained twice from the same start: the second run reuses
    # the compiled train step (one compilation instead of two).
    model.optimizer.build(model.trainable_variables)
    state = model.variables + model.optimizer.variables
    start = [keras.ops.convert_to_numpy(v.value) for v in state]

    # 1. tf.data with the global batch: Keras shards it per process
    # (rebatch to global_batch / num_processes, then shard by process id).
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    model.fit(dataset, epochs=1, verbose=0)
    save("tf_data", model)

    # 2. NumPy with auto-sharding on (the default): refused before any step.
    try:
        model.fit(
            x, y, batch_size=global_batch, epochs=1, shuffle=False, verbose=0
        )
    except ValueError as error:
        record["numpy_error"] = np.array(str(error))

    # 3. NumPy, sharded by the user: auto_shard_dataset=False and each
    # process passes its own part of every global batch, with the
    # per-process batch size; Keras assembles the global batch from the
    # processes' parts (jax.make_array_from_process_local_data).
    for variable, value in zip(state, start):
        variable.assign(value)
    distribution.auto_shard_dataset = False
    local = global_batch // args.num_processes
    rows = np.arange(len(x)).reshape(-1, args.num_processes, local)
    rows = rows[:, args.process_id].reshape(-1)
    model.fit(
        x[rows], y[rows], batch_size=local, epochs=1, shuffle=False, verbose=0
    )
    save("numpy_sharded", model)
    np.savez(args.out, **record)


if __name__ == "__main__":
    main()
