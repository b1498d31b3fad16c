"""The optimizer slots of a `GrowableEmbedding`: one variable per slot name
(momentum, accumulator, ...), with the table's rows, grown and restarted
with it, and how a table with `optimizer=None` takes up the rule of the
model's optimizer.

With `optimizer=None` the layer holds every slot a followed rule may use
(`optimizers.followed_slot_names()`), those not in use with no rows. Until
it knows the rule, the fresh rows of a slot (grown or padded) have no known
initial value: they hold zeros and are filled in when the rule is known.
"""

import numpy as np
from keras import ops

from kmodels.backend import growth as growth_backend
from kmodels.growable import optimizers


def slot_names(layer):
    """Names of `layer.slot_variables`, in order."""
    if layer.optimizer is None:
        return optimizers.followed_slot_names()
    return layer.optimizer.slot_names


def initial_value(layer, name):
    """Value of a fresh row of slot `name`; `None` while `optimizer=None`
    has not followed a rule yet."""
    rule = layer.table_optimizer
    if rule is None:
        return None
    return rule.slot_initial_value(name)


def fresh_rows(layer, name, start, stop, dtype):
    """Rows `start..stop-1` of a fresh slot `name`, as a NumPy array."""
    value = initial_value(layer, name)
    if value is None:
        # Not known yet (`optimizer=None`): filled in when it is.
        layer._unset_from.setdefault(name, start)
        value = 0.0
    return np.full((stop - start, layer.output_dim), value, dtype)


def live_slots(layer):
    """`(name, variable)` of the slots that hold rows."""
    return [
        (name, slot)
        for name, slot in zip(slot_names(layer), layer.slot_variables)
        if slot.shape[0]
    ]


def follow(layer, rule):
    """Makes `layer` (built, `optimizer=None`) train with the
    `SparseOptimizer` `rule`; returns whether the rule changed. The rule's
    slots keep their rows when the layer holds that rule's state;
    otherwise they, and the step, start fresh."""
    changed = rule != layer._followed
    layer._followed = rule
    needed = rule.slot_names
    names = slot_names(layer)
    live = [name for name, _ in live_slots(layer)]
    if sorted(live) != sorted(needed):
        # Another rule's state, or none yet: the rule starts fresh.
        for name, slot in zip(names, layer.slot_variables):
            rows = layer.capacity if name in needed else 0
            growth_backend.resize_variable(
                slot, fresh_rows(layer, name, 0, rows, slot.dtype)
            )
        layer.step.assign(0.0)
        # The step restarts: so does the record of the rows' last step.
        growth_backend.resize_variable(
            layer.trained_at, np.zeros((layer.capacity, 1), "float32")
        )
        layer._unset_from = {}
        return True
    for name, start in layer._unset_from.items():
        slot = dict(zip(names, layer.slot_variables))[name]
        kept = ops.convert_to_numpy(slot.value)[:start]
        fresh = fresh_rows(layer, name, start, layer.capacity, kept.dtype)
        growth_backend.resize_variable(slot, np.concatenate([kept, fresh]))
    layer._unset_from = {}
    return changed


def append_rows(layer, old, capacity):
    """Grows the slots in use from `old` to `capacity` rows (fresh rows)."""
    for name, slot in live_slots(layer):
        growth_backend.append_rows(
            slot, fresh_rows(layer, name, old, capacity, slot.dtype)
        )


def reset_rows(layer, rows):
    """Writes the initial value into the sorted unique `rows` of every
    slot in use."""
    for name, slot in live_slots(layer):
        value = initial_value(layer, name) or 0.0
        growth_backend.write_rows(
            slot, rows, np.full((len(rows), layer.output_dim), value)
        )
