"""Saving and loading a `GrowableEmbedding`'s state in Keras weight stores
(`.keras` archives, `.weights.h5` files, checkpoints): the table, its
optimizer slots and its step, each with a CRC32 checksum
(`saved_state`). Loading checks every entry and its shape before it
changes the layer.
"""

import numpy as np
from keras import ops

from kmodels.backend import growth as growth_backend
from kmodels.growable import slots
from kmodels.growable.saved_state import checked_entries
from kmodels.growable.saved_state import entry_checksums
from kmodels.growable.sizing import round_up


def _entry_names(layer, trained_at=True):
    # `optimizer=None`: every slot a followed rule may use, those not in
    # use with no rows. `trained_at` (each row's last step, for delta
    # export): absent from files saved before kmodels kept it.
    names = ("embeddings", *slots.slot_names(layer), "step")
    return names + ("trained_at",) if trained_at else names


def save(layer, store):
    """Writes the table, slots, step and their checksums into `store`."""
    entries = {"embeddings": ops.convert_to_numpy(layer.embeddings.value)}
    for name, slot in zip(slots.slot_names(layer), layer.slot_variables):
        entries[name] = ops.convert_to_numpy(slot.value)
    entries["step"] = ops.convert_to_numpy(layer.step.value)
    entries["trained_at"] = ops.convert_to_numpy(layer.trained_at.value)
    for name, value in entries.items():
        store[name] = value
    store["checksum"] = entry_checksums(entries, _entry_names(layer))


def load(layer, store):
    """Reads what `save` wrote, checks it, then resizes the layer's
    variables to the saved capacity (padded to a multiple of its row
    shards) and assigns them. Raises a `ValueError` naming the layer and
    the entry before any change."""
    where = f"GrowableEmbedding '{layer.name}'"
    # Everything is read and checked before the layer changes.
    names = _entry_names(layer, "trained_at" in store)
    entries = checked_entries(store, names, where)
    table = entries["embeddings"]
    if table.ndim != 2 or table.shape[0] < 1 or table.dtype.kind not in "fV":
        raise ValueError(
            f"{where}: saved entry 'embeddings' must be a 2-D float "
            f"array with rows; got shape {table.shape}, dtype "
            f"{table.dtype}."
        )
    if table.shape[1] != layer.output_dim:
        raise ValueError(
            f"GrowableEmbedding '{layer.name}': saved rows have "
            f"{table.shape[1]} columns; output_dim={layer.output_dim}."
        )
    for name in slots.slot_names(layer):
        shape = entries[name].shape
        unused = layer.optimizer is None and shape == (0, table.shape[1])
        if shape != table.shape and not unused:
            raise ValueError(
                f"{where}: saved entry {name!r} (an optimizer slot) has "
                f"shape {entries[name].shape}; the saved table has "
                f"{table.shape}."
            )
    if entries["step"].shape != ():
        raise ValueError(
            f"{where}: saved entry 'step' must be a scalar; got shape "
            f"{entries['step'].shape}."
        )
    if "trained_at" in entries and entries["trained_at"].shape != (
        table.shape[0],
        1,
    ):
        raise ValueError(
            f"{where}: saved entry 'trained_at' must have shape "
            f"({table.shape[0]}, 1), a step per saved row; got "
            f"{entries['trained_at'].shape}."
        )
    if not layer.built:
        layer.build()
    # Saved with another number of shards (or none): pad to a multiple
    # of this table's (JAX cannot shard the saved rows otherwise), with
    # the rows growth would have added.
    saved = len(table)
    capacity = round_up(saved, layer.row_multiple)
    growth_backend.resize_variable(
        layer.embeddings,
        np.concatenate([table, layer._initial_rows(saved, capacity)]),
    )
    if layer.optimizer is None:
        # The saved slots say which rule's state they hold; the next
        # `follow_optimizer` keeps them if the model's rule is that one.
        layer._followed = None
        layer._unset_from = {}
    for name, slot in zip(slots.slot_names(layer), layer.slot_variables):
        values = entries[name]
        if len(values):
            pad = slots.fresh_rows(layer, name, saved, capacity, values.dtype)
            values = np.concatenate([values, pad])
        growth_backend.resize_variable(slot, values)
    layer.step.assign(entries["step"])
    # Files saved before `trained_at` existed: no row trained yet.
    trained_at = entries.get("trained_at", np.zeros((saved, 1), "float32"))
    growth_backend.resize_variable(
        layer.trained_at,
        np.concatenate(
            [trained_at, np.zeros((capacity - saved, 1), trained_at.dtype)]
        ),
    )
