"""Growable tables trained by several processes under torch DDP."""

from kmodels.backend import keras_internals
from kmodels.backend import table_replicas
from kmodels.growable.embedding import GrowableEmbedding


def replicate_tables(model):
    """Makes the `GrowableEmbedding` tables of `model` train under torch
    `DistributedDataParallel` as on one process.

    DDP averages the gradients of trainable parameters; a growable table is
    a non-trainable variable that its sparse optimizer writes in place in
    the backward pass, and its capacity follows the ids of the batch. After
    this call, on every process:

    - the table grows for the largest id of any process's batch (an
      all-reduce before it grows), so every replica has the same capacity;
    - the backward pass all-gathers every process's ids and gradients, in
      rank order, and applies one update for all of them, with the
      gradients averaged over the processes as DDP averages the dense ones;
    - the table's step counter counts in place, without a gradient (DDP is
      told to ignore it; torch optimizers skip a parameter without one).

    The tables then equal one process trained on the concatenated global
    batches, rows, optimizer slots and step. Keys (`KeyIndex`) must get the
    same rows on every process: look up the global batch on every process,
    then take this process's slice (docs/distributed.md, "Growable tables
    under torch DDP"). Call it on every process after
    `torch.distributed.init_process_group` and before wrapping the model in
    `DistributedDataParallel`; it copies rank 0's tables (seed, rows,
    slots, step) to the other ranks. torch backend only.

    Args:
        model: a built Keras model (or layer) holding `GrowableEmbedding`
            tables, each with its own sparse optimizer.

    Returns:
        The list of the tables made replicas.

    Raises:
        ValueError: no `GrowableEmbedding` in `model`, a table without its
            own optimizer (`optimizer=None`), or processes whose tables
            differ.
        RuntimeError: no torch process group.
        NotImplementedError: on TensorFlow and JAX.

    Example:

    ```python
    torch.distributed.init_process_group("gloo")
    tables = kmodels.distributed.replicate_tables(model)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ```
    """
    layers = [model, *keras_internals.sublayers(model)]
    tables = [layer for layer in layers if isinstance(layer, GrowableEmbedding)]
    if not tables:
        raise ValueError(
            "kmodels.distributed.replicate_tables expects a model holding "
            f"GrowableEmbedding tables; model '{model.name}' has none."
        )
    for table in tables:
        if table.table_optimizer is None:
            raise ValueError(
                "kmodels.distributed.replicate_tables expects tables with "
                f"their own sparse optimizer; GrowableEmbedding "
                f"'{table.name}' has optimizer=None (it follows a Keras "
                "optimizer, which a torch loop does not have). Pass "
                'optimizer="adam" (or "sgd", "adagrad", ...) to the table.'
            )
        if not table.built:
            table.build()
    table_replicas.replicate(model, tables)
    return tables
