import numpy as np


def dense(x, kernel, bias=None, activation=None):
    """Affine map `activation(x @ kernel + bias)` over the last axis.

    Args:
        x: `(..., in)`.
        kernel: `(in, out)`.
        bias: `(out,)` or None.
        activation: None, "relu", "tanh" or "sigmoid".
    """
    y = np.asarray(x, np.float64) @ np.asarray(kernel, np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    if activation is None or activation == "linear":
        return y
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "tanh":
        return np.tanh(y)
    if activation == "sigmoid":
        return 1.0 / (1.0 + np.exp(-y))
    raise ValueError(f"unknown activation {activation!r}")
