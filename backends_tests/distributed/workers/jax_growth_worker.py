"""One process of a multi-process JAX run that grows a row-sharded
`GrowableEmbedding` inside `fit` (`sharded_growth_task.py`).

Launched by `multi_process_test.py`, once per process:

    python jax_growth_worker.py OUT.npz --num-processes 2 --process-id 0 \
        --coordinator localhost:PORT

Each process has 2 CPU devices; the 4 devices of the 2 processes form the
mesh. Two runs from the same start, each under `ModelParallel` with the
table's rows sharded over the mesh's "model" axis
(`kmodels.distributed.shard_embedding_rows`) and
`auto_shard_dataset=False`:
- mesh (1, 4): the rows over all 4 devices of both processes; the batch
  is not split, every process passes the whole global batch;
- mesh (2, 2): the rows over each process's 2 devices, the batch split
  between the processes, each passing its half of every global batch.
Writes, per run, the growth log, the table's sharding, the rows each of
this process's devices holds and every variable (gathered whole) to
OUT.npz. With `--bad-id-in P`, process P puts a bad id in its part of the
split run instead, and each process writes the error it raised.
"""

import argparse
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
HERE = os.path.dirname(os.path.abspath(__file__))
# The kmodels of this checkout (three folders up).
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(os.path.dirname(HERE)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--coordinator", required=True)
    # Refusal run: this process puts a negative id in its part of the
    # first batch (mesh (2, 2) only); every process records what it raised.
    parser.add_argument("--bad-id-in", type=int, default=None)
    args = parser.parse_args()

    from kmodels.distributed import virtual_cpu_devices

    virtual_cpu_devices(2, backend="jax")

    import keras
    import numpy as np
    import sharded_growth_task as task
    from jax.experimental import multihost_utils

    import kmodels

    keras.distribution.initialize(
        args.coordinator, args.num_processes, args.process_id
    )
    x, y = task.data()
    record = {}

    def distribute(shape):
        mesh = keras.distribution.DeviceMesh(
            shape, ("batch", "model"), keras.distribution.list_devices()
        )
        layout_map = keras.distribution.LayoutMap(mesh)
        kmodels.distributed.shard_embedding_rows(layout_map, "table")
        keras.distribution.set_distribution(
            keras.distribution.ModelParallel(
                layout_map=layout_map,
                batch_dim_name="batch",
                auto_shard_dataset=False,
            )
        )

    def mine(array):
        # This process's part of every global batch of `array`: its own
        # rows when the batch is split between the processes.
        local = task.GLOBAL_BATCH // args.num_processes
        rows = np.arange(len(array)).reshape(-1, args.num_processes, local)
        return rows[:, args.process_id].reshape(-1), local

    if args.bad_id_in is not None:
        distribute((2, 2))
        model, table = task.build_model()
        rows, local = mine(x)
        x_mine = x[rows].copy()
        if args.process_id == args.bad_id_in:
            x_mine[0, 0] = -1
        try:
            task.train(model, x_mine, y[rows], local)
            record["error"] = np.array("")
        except ValueError as error:
            record["error"] = np.array(str(error))
        record["capacity"] = np.array(table.capacity)
        record["iterations"] = np.array(int(model.optimizer.iterations))
        np.savez(args.out, **record)
        return

    for name, shape in (("whole", (1, 4)), ("split", (2, 2))):
        distribute(shape)
        model, table = task.build_model()
        if shape[0] == 1:
            task.train(model, x, y, task.GLOBAL_BATCH)
        else:
            rows, local = mine(x)
            task.train(model, x[rows], y[rows], local)
        value = table.embeddings.value
        record[f"{name}/log"] = np.array([e["to"] for e in table.growth_log])
        record[f"{name}/spec"] = np.array(str(tuple(value.sharding.spec)))
        record[f"{name}/local_rows"] = np.array(
            [shard.data.shape[0] for shard in value.addressable_shards]
        )
        for v in model.variables:
            record[f"{name}/weights/{v.path}"] = np.asarray(
                multihost_utils.process_allgather(v.value, tiled=True)
            )
    np.savez(args.out, **record)
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    main()
