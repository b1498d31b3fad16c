"""GRU from Cho et al. (2014), in the "reset after" variant.

References:
    - [Cho et al., 2014](https://arxiv.org/abs/1406.1078)
    - cuDNN's GRU, which applies the reset gate after the recurrent matmul:
      `h~ = tanh(W_h x + b_h + r * (U_h h + c_h))`. Keras' default
      (`reset_after=True`) uses this form.
"""

import numpy as np


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gru(
    x,
    kernel,
    recurrent_kernel,
    bias,
    mask=None,
    initial_state=None,
    go_backwards=False,
    zero_output_for_mask=False,
):
    """Runs a GRU over `x` and returns `(sequence, final_state)`.

    Equations, for gates in the order update `z`, reset `r`, candidate `h~`
    (the column blocks of `kernel`, `recurrent_kernel` and each bias row):

        z_t  = sigmoid(x_t W_z + b_z + h_{t-1} U_z + c_z)
        r_t  = sigmoid(x_t W_r + b_r + h_{t-1} U_r + c_r)
        h~_t = tanh(x_t W_h + b_h + r_t * (h_{t-1} U_h + c_h))
        h_t  = z_t * h_{t-1} + (1 - z_t) * h~_t

    A masked step (mask False) leaves the state unchanged; its output is the
    previous output, or zeros when `zero_output_for_mask`.

    Args:
        x: `(batch, time, features)`.
        kernel: `(features, 3 * units)`, blocks `[W_z | W_r | W_h]`.
        recurrent_kernel: `(units, 3 * units)`, blocks `[U_z | U_r | U_h]`.
        bias: `(2, 3 * units)`: row 0 is the input bias `b`, row 1 the
            recurrent bias `c`.
        mask: optional boolean `(batch, time)`.
        initial_state: optional `(batch, units)`; zeros by default.
        go_backwards: process the sequence from the last step to the first;
            the returned sequence is in processing order (as Keras does).
        zero_output_for_mask: see above.
    """
    x = np.asarray(x, np.float64)
    w = np.asarray(kernel, np.float64)
    u = np.asarray(recurrent_kernel, np.float64)
    b = np.asarray(bias, np.float64)
    batch, time, _ = x.shape
    units = u.shape[0]
    if mask is None:
        mask = np.ones((batch, time), bool)
    mask = np.asarray(mask, bool)
    h = (
        np.zeros((batch, units))
        if initial_state is None
        else np.asarray(initial_state, np.float64)
    )
    steps = range(time - 1, -1, -1) if go_backwards else range(time)
    out_prev = np.zeros((batch, units))
    outputs = []
    for t in steps:
        xw = x[:, t] @ w + b[0]
        hu = h @ u + b[1]
        z = _sigmoid(xw[:, :units] + hu[:, :units])
        r = _sigmoid(xw[:, units : 2 * units] + hu[:, units : 2 * units])
        cand = np.tanh(xw[:, 2 * units :] + r * hu[:, 2 * units :])
        h_new = z * h + (1.0 - z) * cand
        m = mask[:, t : t + 1]
        h = np.where(m, h_new, h)
        fill = np.zeros_like(h_new) if zero_output_for_mask else out_prev
        out = np.where(m, h_new, fill)
        outputs.append(out)
        out_prev = out
    return np.stack(outputs, axis=1), h


def bidirectional_gru(x, forward, backward, mask=None, merge_mode="sum"):
    """Bidirectional GRU (Schuster & Paliwal, 1997) returning sequences.

    The backward GRU reads the sequence reversed; its outputs are reversed
    back so that position t of both directions lines up, then merged. Masked
    positions output zeros in both directions, as a bidirectional sequence
    model must (a padded position has no content).

    Args:
        x: `(batch, time, features)`.
        forward: `(kernel, recurrent_kernel, bias)` of the forward GRU.
        backward: same for the backward GRU.
        mask: optional boolean `(batch, time)`.
        merge_mode: "sum", "concat", "mul" or "ave".

    Returns:
        `(sequence, forward_state, backward_state)`.
    """
    fwd, h_f = gru(x, *forward, mask=mask, zero_output_for_mask=True)
    bwd, h_b = gru(
        x, *backward, mask=mask, go_backwards=True, zero_output_for_mask=True
    )
    bwd = bwd[:, ::-1]
    if merge_mode == "sum":
        y = fwd + bwd
    elif merge_mode == "concat":
        y = np.concatenate([fwd, bwd], axis=-1)
    elif merge_mode == "mul":
        y = fwd * bwd
    elif merge_mode == "ave":
        y = (fwd + bwd) / 2.0
    else:
        raise ValueError(f"unknown merge_mode {merge_mode!r}")
    return y, h_f, h_b
