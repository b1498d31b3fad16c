import numpy as np


def sparse_optimizer_step(
    table,
    slots,
    step,
    ids,
    grads,
    kind="adam",
    learning_rate=0.001,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-7,
):
    """One row-sparse optimizer step on an embedding table.

    The gradient of each row is the sum of the gradients of its occurrences
    in `ids`; only those rows change. SGD: `w -= lr * g`. Adam ("lazy Adam",
    Kingma and Ba 2015, Algorithm 1, applied to the rows of the batch as in
    TensorFlow Addons' LazyAdam), with `t = step + 1`:
    `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
    `w -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)`.

    Args:
        table: float array `(rows, dim)`.
        slots: `(m, v)` arrays like `table` for Adam, `()` for SGD.
        step: number of steps taken before this one.
        ids: integer array, any shape.
        grads: float array `ids.shape + (dim,)`: dLoss/d(looked-up rows).

    Returns:
        `(table, slots)` after the step (new float64 arrays).
    """
    table = np.array(table, np.float64)
    slots = [np.array(s, np.float64) for s in slots]
    ids = np.asarray(ids).reshape(-1)
    grads = np.asarray(grads, np.float64).reshape(len(ids), table.shape[1])
    summed = {}
    for i, g in zip(ids.tolist(), grads):
        summed[i] = summed.get(i, 0.0) + g
    t = step + 1
    for i, g in summed.items():
        if kind == "sgd":
            table[i] -= learning_rate * g
        else:
            m, v = slots
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            alpha = learning_rate * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
            table[i] -= alpha * m[i] / (np.sqrt(v[i]) + epsilon)
    return table, slots
