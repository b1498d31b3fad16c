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
    momentum=0.0,
    nesterov=False,
):
    """One row-sparse optimizer step on an embedding table.

    The gradient `g` of each row is the sum of the gradients of its
    occurrences in `ids`; only those rows and their slots change ("lazy":
    a row absent from the batch keeps its values and slots). `lr` is
    `learning_rate(step)` when `learning_rate` is callable (a schedule,
    evaluated at the number of earlier steps, as Keras evaluates it at
    `optimizer.iterations`), else the constant.

    - SGD: `w -= lr g`. With momentum `mu` (Sutskever et al. 2013, in the
      form of `keras.optimizers.SGD`): `m = mu m - lr g`, then `w += m`, or
      with Nesterov `w += mu m - lr g`.
    - Adagrad (Duchi et al. 2011, as `keras.optimizers.Adagrad`):
      `a += g^2`, `w -= lr g / sqrt(a + eps)`.
    - Adam ("lazy Adam", Kingma and Ba 2015, Algorithm 1, applied to the
      rows of the batch as in TensorFlow Addons' LazyAdam), `t = step + 1`:
      `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
      `w -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)`.

    Args:
        table: float array `(rows, dim)`.
        slots: arrays like `table`: `(m, v)` for Adam, `(m,)` for SGD with
            momentum, `(a,)` for Adagrad, `()` for plain SGD.
        step: number of steps taken before this one.
        ids: integer array, any shape.
        grads: float array `ids.shape + (dim,)`: dLoss/d(looked-up rows).
        kind: `"sgd"`, `"adagrad"` or `"adam"`.
        learning_rate: float, or a function `step -> float`.

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
    lr = learning_rate(step) if callable(learning_rate) else learning_rate
    t = step + 1
    for i, g in summed.items():
        if kind == "sgd" and not slots:
            table[i] -= lr * g
        elif kind == "sgd":
            (m,) = slots
            m[i] = momentum * m[i] - lr * g
            if nesterov:
                table[i] += momentum * m[i] - lr * g
            else:
                table[i] += m[i]
        elif kind == "adagrad":
            (a,) = slots
            a[i] += g * g
            table[i] -= lr * g / np.sqrt(a[i] + epsilon)
        elif kind == "adam":
            m, v = slots
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            alpha = lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
            table[i] -= alpha * m[i] / (np.sqrt(v[i]) + epsilon)
        else:
            raise ValueError(f"unknown sparse optimizer kind {kind!r}")
    return table, slots


def exponential_decay(initial_learning_rate, decay_steps, decay_rate):
    """The learning rate `lr0 * decay_rate ** (step / decay_steps)` as a
    function of the step (the schedule of
    `keras.optimizers.schedules.ExponentialDecay`, not staircase)."""

    def rate(step):
        return initial_learning_rate * decay_rate ** (step / decay_steps)

    return rate
