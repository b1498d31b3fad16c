"""The row-sparse update rules of `kmodels.layers.GrowableEmbedding`.

Written with `keras.ops` only: the backward pass of every backend's
`sparse_lookup` runs them on the rows of the batch. Each rule follows the
equations of the Keras optimizer of the same name, applied to the rows that
the batch names ("lazy": rows absent from the batch, their slots included,
do not move).
"""

import keras
from keras import ops

# The slots of each rule, in the order `sparse_rule` takes and returns them.
_SLOTS = {
    "sgd": ("momentum",),
    "adagrad": ("accumulator",),
    "adam": ("momentum", "velocity"),
}


def slot_names(kind, hyper):
    """Names of the per-row slots rule `kind` keeps (SGD without momentum
    keeps none)."""
    if kind == "sgd" and not hyper["momentum"]:
        return ()
    return _SLOTS[kind]


def slot_initial_value(kind, hyper, name):
    """Value of a fresh row of slot `name`: Adagrad's accumulator starts at
    `initial_accumulator_value`, every other slot at zero."""
    if name == "accumulator" and kind == "adagrad":
        return hyper["initial_accumulator_value"]
    return 0.0


def learning_rate_at(hyper, step, dtype):
    """The learning rate of the update that follows `step` earlier updates:
    a `keras.optimizers.schedules.LearningRateSchedule` evaluated at `step`
    (as Keras evaluates it at `optimizer.iterations`), or the constant."""
    rate = hyper["learning_rate"]
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        return ops.cast(rate(ops.cast(step, "int32")), dtype)
    return rate


def sparse_rule(kind, hyper, step, rows, slots, grads, dtype):
    """One update of `rows` (the distinct rows of a batch) and their slots.

    Args:
        kind: `"sgd"`, `"adagrad"` or `"adam"`.
        hyper: the rule's hyperparameters (`learning_rate` a float or a
            schedule).
        step: updates taken before this one (the table's step counter).
        rows: current values of the rows.
        slots: their slot rows, in the order of `slot_names`.
        grads: the summed gradient of each row.
        dtype: the variables' dtype.

    Returns:
        `(new_rows, new_slots)`.
    """
    lr = learning_rate_at(hyper, step, dtype)
    if kind == "sgd":
        if not slots:
            return rows - lr * grads, []
        mu = hyper["momentum"]
        (m,) = slots
        m = mu * m - lr * grads
        if hyper["nesterov"]:
            return rows + mu * m - lr * grads, [m]
        return rows + m, [m]
    if kind == "adagrad":
        (acc,) = slots
        acc = acc + ops.square(grads)
        return rows - lr * grads / ops.sqrt(acc + hyper["epsilon"]), [acc]
    b1, b2, eps = hyper["beta_1"], hyper["beta_2"], hyper["epsilon"]
    m, v = slots
    t = ops.cast(step, dtype) + 1.0
    m = b1 * m + (1.0 - b1) * grads
    v = b2 * v + (1.0 - b2) * ops.square(grads)
    alpha = lr * ops.sqrt(1.0 - ops.power(b2, t)) / (1.0 - ops.power(b1, t))
    return rows - alpha * m / (ops.sqrt(v) + eps), [m, v]
