"""Embedding tables sharded by rows with `keras.distribution.ModelParallel`."""

import re

# The variables that hold one row per id: the table, and the sparse
# optimizer's moments of `kmodels.layers.GrowableEmbedding` (the model
# optimizer's slots of a plain `Embedding` take the table's layout by
# themselves: Keras creates them with the layout of their variable).
_ROW_VARIABLES = ("embeddings", "momentum", "velocity", "accumulator")


def shard_embedding_rows(layout_map, *layers, axis="model"):
    """Adds the `LayoutMap` entries that shard embedding tables by rows.

    Each table is split along its rows over the mesh axis `axis` (each
    device holds `rows / mesh.shape[axis]` consecutive rows) and replicated
    over the other axes; its columns stay whole. This covers a plain
    `keras.layers.Embedding` (`embeddings`; the model optimizer's slots
    follow the table) and `kmodels.layers.GrowableEmbedding` (`embeddings`
    and its own optimizer's `momentum` and `velocity`, which grow with it).

    JAX only: Keras' TensorFlow and torch backends ignore `LayoutMap`
    (see `docs/distributed.md`). Sharding needs a row count that is a
    multiple of the number of shards: JAX refuses anything else.
    `GrowableEmbedding` rounds its capacity up by itself; a plain
    `Embedding`'s `input_dim` is yours to choose.

    Args:
        layout_map: `keras.distribution.LayoutMap` to add the entries to.
        *layers: the embedding layers (their `name` is used, so call this
            before building them, with the names they will have) or layer
            names. Each matches the layer at any depth of the model.
        axis: str. The mesh axis to split the rows over.

    Returns:
        `layout_map`, for chaining.

    Raises:
        ValueError: when `axis` is not an axis of the layout map's mesh,
            or no layer is given.

    Example:

    ```python
    mesh = keras.distribution.DeviceMesh((1, 4), ("batch", "model"))
    layout_map = keras.distribution.LayoutMap(mesh)
    kmodels.distributed.shard_embedding_rows(layout_map, "table")
    distribution = keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name="batch"
    )
    with distribution.scope():
        table = kmodels.layers.GrowableEmbedding(
            8, initial_capacity=6, name="table"
        )
        table.build()
    table.capacity  # 8: rounded up to a multiple of the 4 shards
    table.embeddings.value.sharding.spec  # PartitionSpec('model', None)
    ```
    """
    if not layers:
        raise ValueError("shard_embedding_rows needs at least one layer.")
    mesh = layout_map.device_mesh
    if mesh is not None and axis not in tuple(mesh.axis_names):
        raise ValueError(
            f"shard_embedding_rows: axis {axis!r} is not an axis of the "
            f"mesh; got axis names {tuple(mesh.axis_names)}."
        )
    variables = "|".join(_ROW_VARIABLES)
    for layer in layers:
        name = layer if isinstance(layer, str) else layer.name
        layout_map[f"(.*/)?{re.escape(name)}/({variables})"] = (axis, None)
    return layout_map
