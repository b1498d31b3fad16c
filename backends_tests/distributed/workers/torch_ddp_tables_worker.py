"""One rank of a torch DDP run of a model with two `GrowableEmbedding`
tables (`growable_task.py`).

Launched by `replicated_tables_test.py`, once per process, as `torchrun`
would:

    python torch_ddp_tables_worker.py OUT.npz --world-size 2 --rank 0 \
        --init-method tcp://127.0.0.1:PORT

Each rank looks up the keys of the whole global batch (the same rows on
every rank), restarts the rows of evicted keys, and trains on its rows of
the batch (rank 0 the first 8, rank 1 the rest: 8, or 7 in the short last
batch) through `kmodels.distributed.replicate_tables`
and `DistributedDataParallel` (gloo), in a plain torch loop. Writes every
variable, the growth logs and the index's keys to OUT.npz; rank 0 also
saves the model to OUT.keras (OUT.npz without `.npz`).
"""

import argparse
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"
HERE = os.path.dirname(os.path.abspath(__file__))
# The kmodels of this checkout (three folders up), not a copy installed in
# the environment, which tox does not update for every change.
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(os.path.dirname(HERE)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--init-method", required=True)
    args = parser.parse_args()

    import growable_task as task
    import numpy as np
    import torch

    import kmodels

    # Two processes share the test machine's cores.
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo",
        init_method=args.init_method,
        rank=args.rank,
        world_size=args.world_size,
    )
    found = _replicate_checks(args.rank)
    model, grown, bounded, index = task.build_model()
    kmodels.distributed.replicate_tables(model)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    # The tables' variables get no gradient: SGD skips them.
    optimizer = torch.optim.SGD(model.parameters(), lr=task.LEARNING_RATE)
    mine = task.rank_rows(args.rank, args.world_size)
    for ids, keys, y in task.data():
        rows = task.global_rows(index, bounded, keys)
        optimizer.zero_grad()
        outputs = ddp(
            [torch.from_numpy(ids[mine]), torch.from_numpy(rows[mine])],
            training=True,
        )
        loss = torch.nn.functional.mse_loss(outputs, torch.from_numpy(y[mine]))
        loss.backward()
        optimizer.step()
    found.update(task.record(model, grown, bounded, index))
    torch.distributed.destroy_process_group()
    if args.rank == 0:
        # The replicas are identical: one saves, as a user's job would.
        model.save(args.out[: -len(".npz")] + ".keras")
    np.savez(args.out, **found)
    # As torch_ddp_worker.py: leave without destructors (a rare hang in
    # them after destroy_process_group()).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _replicate_checks(rank):
    """What `replicate_tables` does before training, on one-table models
    that differ by rank: refuses tables of different capacities (on every
    rank), and gives rank 0's seed and rows to every rank (the rows of a
    later growth agree too)."""
    import keras

    import kmodels

    def one_table(**kwargs):
        ids = keras.Input((2,), dtype="int32")
        table = kmodels.layers.GrowableEmbedding(4, name="table", **kwargs)
        return keras.Model(ids, table(ids)), table

    found = {}
    model, _ = one_table(initial_capacity=2 + 2 * rank, seed=5)
    try:
        kmodels.distributed.replicate_tables(model)
    except ValueError as error:
        found["mismatch_error"] = str(error)
    model, table = one_table(initial_capacity=2, seed=5 + rank)
    kmodels.distributed.replicate_tables(model)
    table.grow_to(4)
    found["seeded_seed"] = table.seed
    found["seeded_rows"] = keras.ops.convert_to_numpy(table.embeddings.value)
    # What this rank's own seed gives (rank 1's differs).
    _, own = one_table(initial_capacity=4, seed=5 + rank)
    found["seeded_own_rows"] = keras.ops.convert_to_numpy(own.embeddings.value)
    return found


if __name__ == "__main__":
    main()
