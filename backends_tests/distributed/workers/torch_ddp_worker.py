"""One process of a torch DistributedDataParallel run of a Keras 3 model.

Launched by `multi_process_test.py`, once per process, the way a user
launches one process per host (or `torchrun` does):

    python torch_ddp_worker.py OUT.npz --world-size 2 --rank 0 \
        --init-method tcp://127.0.0.1:PORT

On the torch backend a Keras model is a `torch.nn.Module`, so DDP wraps it
as it is and a plain torch loop trains it (the recipe of the Keras guide
"Multi-GPU distributed training with PyTorch", here on CPU with gloo).
`--world-size 1` is the single-process reference (no DDP). Writes the
trained weights to OUT.npz.
"""

import argparse
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--init-method", default=None)
    args = parser.parse_args()

    import numpy as np
    import tiny_task
    import torch

    # Two processes share the test machine's cores.
    torch.set_num_threads(1)
    distributed = args.world_size > 1
    if distributed:
        torch.distributed.init_process_group(
            "gloo",
            init_method=args.init_method,
            rank=args.rank,
            world_size=args.world_size,
        )
    x, y = tiny_task.data()
    model = tiny_task.build_model()
    record = {"is_module": isinstance(model, torch.nn.Module)}
    # DDP broadcasts rank 0's parameters to every rank, then averages the
    # gradients over the ranks in backward().
    trained = (
        torch.nn.parallel.DistributedDataParallel(model)
        if distributed
        else model
    )
    dataset = torch.utils.data.TensorDataset(
        torch.from_numpy(x), torch.from_numpy(y).long()
    )
    # Rank r reads examples r, r + world_size, ...: each global batch of 16
    # is the same 16 examples as the reference's batch.
    sampler = torch.utils.data.distributed.DistributedSampler(
        dataset, num_replicas=args.world_size, rank=args.rank, shuffle=False
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=tiny_task.GLOBAL_BATCH // args.world_size,
        sampler=sampler,
    )
    if not distributed:
        for path, value in tiny_task.trainable_weights(model).items():
            record[f"initial/{path}"] = value
    optimizer = torch.optim.SGD(model.parameters(), lr=tiny_task.LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = 0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = loss_fn(trained(inputs, training=True), targets)
        loss.backward()
        optimizer.step()
        steps += 1
    record["steps"] = steps
    record["local_batch"] = loader.batch_size
    for path, value in tiny_task.trainable_weights(model).items():
        record[f"weights/{path}"] = value
    if distributed:
        torch.distributed.destroy_process_group()
    np.savez(args.out, **record)
    # About one run in three, rank 0 hung for good right here, when main()
    # returned: a faulthandler dump showed the main thread in this frame
    # with no Python frame below, i.e. in the destructor of a local (the
    # DDP wrapper, its gloo state or the DataLoader) after
    # destroy_process_group(). The weights are saved: leave without
    # running destructors or exit handlers.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
