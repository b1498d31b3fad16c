"""Keras GRUs run as one recurrence, on the layers' own variables.

Keras' `GRU` runs one layer at a time and multiplies each step's input by
its kernel inside the loop. Here the input projections of all steps are
one matmul before the loop, and several GRUs (the two directions of a
bidirectional GRU, and the decoder's GRU beside them: it does not read the
encoder) run in the same loop over a stacked `(layers, batch, units)` state:
each step is one batched `h @ recurrent_kernel` and a few elementwise ops,
and the backward pass is written by hand (one batched product per step; the
recurrent kernels' gradient is one product over every step after the loop,
where automatic differentiation adds one per step). torch runs the same
loop in its own operations (`kmodels.backend.rnn.gru_recurrence`), at
float32 with the input projections inside it, written into one buffer
(`kmodels.backend.rnn.gru_projected_recurrence`).

The arithmetic is that of `keras.layers.GRU(reset_after=True)` (the
default: gates `z, r, h` in that order in `kernel`, `recurrent_kernel` and
the `(2, 3 * units)` bias, input bias in row 0) and so is the masking: at a
padded step the state is carried over, and the output is zero
(`zero_output_for_mask=True`, as `Bidirectional` sets it) or the last real
output (zeros before any).
"""

from keras import ops

from kmodels.backend.rnn import custom_gradient
from kmodels.backend.rnn import gru_projected_recurrence
from kmodels.backend.rnn import gru_recurrence
from kmodels.backend.rnn import prefers_one_recurrence
from kmodels.backend.rnn import scan


def check_fast_gru(layer):
    """True when `layer` (a `keras.layers.GRU`) is the configuration
    `run_grus` implements: tanh / sigmoid, a bias, `reset_after=True`, no
    dropout, not stateful, not unrolled; and the backend runs it faster
    than the layer (`kmodels.backend.rnn.prefers_one_recurrence`)."""
    cell = layer.cell
    return (
        prefers_one_recurrence()
        and cell.use_bias
        and cell.reset_after
        and not cell.dropout
        and not cell.recurrent_dropout
        and not layer.stateful
        and not layer.unroll
        and getattr(cell.activation, "__name__", "") == "tanh"
        and getattr(cell.recurrent_activation, "__name__", "") == "sigmoid"
    )


def _forward(x_proj, h0, kernel, recurrent_bias, mask):
    """The stacked recurrence's forward pass.

    Args: time-major projected inputs `(t, g, batch, 3u)` (input bias
    included), initial states `(g, batch, u)`, recurrent kernels
    `(g, u, 3u)`, recurrent biases `(g, 1, 3u)` and a boolean mask
    `(t, g, batch, 1)`.

    Returns `((states, final), residuals)`: the states after every step
    `(t, g, batch, u)` (carried over at padded steps), the final states
    `(g, batch, u)`, and what `_backward` needs.
    """

    def body(h, xs):
        x_t, m_t = xs
        inner = ops.matmul(h, kernel) + recurrent_bias
        x_z, x_r, x_n = ops.split(x_t, 3, axis=-1)
        h_z, h_r, h_n = ops.split(inner, 3, axis=-1)
        z = ops.sigmoid(x_z + h_z)
        r = ops.sigmoid(x_r + h_r)
        n = ops.tanh(x_n + r * h_n)
        state = ops.where(m_t, n + z * (h - n), h)
        return state, (state, z, r, n, h_n)

    final, (states, z, r, n, h_n) = scan(body, h0, (x_proj, mask))
    previous = ops.concatenate([h0[None], states[:-1]], axis=0)
    return (states, final), (previous, z, r, n, h_n, mask, kernel)


def _backward(residuals, gradients):
    """Gradients of `_forward`'s inputs (`None` for the mask). The loop
    carries the states' gradient back one step at a time with one batched
    `(g, batch, 3u) @ (g, 3u, u)` product."""
    previous, z, r, n, h_n, mask, kernel = residuals
    d_states, d_final = gradients
    kernel_t = ops.transpose(kernel, (0, 2, 1))

    def body(dh, xs):
        d_out, prev, z, r, n, h_n, m = xs
        d_state = dh + d_out
        d_z = ops.where(m, d_state * (prev - n) * z * (1.0 - z), 0.0)
        d_n = ops.where(m, d_state * (1.0 - z) * (1.0 - n * n), 0.0)
        d_r = d_n * h_n * r * (1.0 - r)
        d_inner = ops.concatenate([d_z, d_r, d_n * r], axis=-1)
        carried = d_state * z + ops.matmul(d_inner, kernel_t)
        d_x = ops.concatenate([d_z, d_r, d_n], axis=-1)
        return ops.where(m, carried, d_state), (d_x,)

    # Last step first. The loop stacks only `d_x`: the gradient of the
    # recurrent products' outputs is `d_x` with its `n` gate times `r`,
    # taken for every step at once after the loop (one stacked
    # `(t, g, batch, 3u)` output less: on JAX its zero fill and its
    # per-step writes measured ~4% of the Seq2Seq train step).
    sequences = (d_states, previous, z, r, n, h_n, mask)
    d_h0, (d_x,) = scan(body, d_final, sequences, reverse=True)
    u = kernel.shape[1]
    d_inner = ops.concatenate(
        [d_x[..., : 2 * u], d_x[..., 2 * u :] * r], axis=-1
    )
    # (g, u, t * batch) @ (g, t * batch, 3u).
    steps, groups, batch, units = ops.shape(previous)
    flat_previous = ops.reshape(
        ops.transpose(previous, (1, 3, 0, 2)), (groups, units, -1)
    )
    flat_inner = ops.reshape(
        ops.transpose(d_inner, (1, 0, 2, 3)), (groups, -1, 3 * units)
    )
    d_kernel = ops.matmul(flat_previous, flat_inner)
    d_bias = ops.sum(d_inner, axis=(0, 2))[:, None, :]
    return d_x, d_h0, d_kernel, d_bias, None


def _output_shapes(x_proj, h0, kernel, recurrent_bias, mask):
    """Static shapes of `_forward`'s outputs, `(t, g, batch, u)` and
    `(g, batch, u)`, each size from whichever input knows it."""
    known = [
        a if a is not None else b
        for a, b in zip(tuple(x_proj.shape)[1:3], tuple(h0.shape)[:2])
    ]
    final = tuple(known) + (h0.shape[-1],)
    return ((x_proj.shape[0],) + final, final)


_recurrence = gru_recurrence() or custom_gradient(
    _forward, _backward, _output_shapes
)


def run_grus(layers, inputs, masks, initial_states, reverse, zero_output):
    """Runs GRU layers over their inputs in one recurrence.

    Args:
        layers: `keras.layers.GRU` layers (built, `check_fast_gru` true for
            each) with the same `units`.
        inputs: one float `(batch, t, features)` per layer, the same batch
            for all; layers given the same tensor share one input
            projection matmul. Different lengths run as many steps as the
            longest (the others are padded, state carried over).
        masks: one boolean `(batch, t)` (True at real steps) or None (every
            step real) per layer.
        initial_states: one float `(batch, units)` per layer.
        reverse: one bool per layer: that layer reads the steps last to
            first (`go_backwards`); its outputs are returned in the
            original time order (as `Bidirectional` aligns them).
        zero_output: one bool per layer. Output zeros at padded steps
            (`zero_output_for_mask=True`); else the last real output (zeros
            before any), as `GRU` without `zero_output_for_mask`.

    Returns:
        `(outputs, states)`: one `(batch, t, units)` sequence and one final
        `(batch, units)` state per layer.
    """
    dtype = inputs[0].dtype
    cells = [layer.cell for layer in layers]

    def variable(v):
        return ops.cast(v, dtype)

    # torch projects inside its recurrence (one buffer, no stacking), when
    # every input is a tensor it can take.
    fused = gru_projected_recurrence(inputs[0])
    if any(gru_projected_recurrence(x) is None for x in inputs):
        fused = None
    # One matmul per distinct input tensor, for every layer that reads it.
    projected = [None] * len(layers)
    for g, x in enumerate(inputs):
        if fused is not None or projected[g] is not None:
            continue
        sharing = [j for j in range(len(layers)) if inputs[j] is x]
        kernel = ops.concatenate(
            [variable(cells[j].kernel) for j in sharing], axis=-1
        )
        bias = ops.concatenate(
            [variable(cells[j].bias)[0] for j in sharing], axis=-1
        )
        # Time-major: (t, batch, 3u) per layer.
        both = ops.matmul(ops.transpose(x, (1, 0, 2)), kernel) + bias
        for j, part in zip(sharing, ops.split(both, len(sharing), axis=-1)):
            projected[j] = part
    # Static lengths; else None (a TensorFlow step traced for any length,
    # a JAX export with symbolic shapes).
    lengths = [x.shape[1] for x in inputs]
    if not all(isinstance(length, int) for length in lengths):
        if any(x is not inputs[0] for x in inputs):
            raise ValueError(
                "run_grus: different input tensors need static lengths; got "
                f"shapes {[tuple(x.shape) for x in inputs]}."
            )
        lengths = [None] * len(inputs)
    steps = None if None in lengths else max(lengths)
    time_masks = []
    for g, x in enumerate(inputs):
        if masks[g] is None:
            mask = ops.ones(ops.shape(x)[:2], "bool")
        else:
            mask = ops.cast(masks[g], "bool")
        mask = ops.transpose(mask, (1, 0))
        if reverse[g]:
            if fused is None:
                projected[g] = ops.flip(projected[g], axis=0)
            mask = ops.flip(mask, axis=0)
        if lengths[g] != steps:
            # Extra steps after the layer's own: state carried over.
            extra = steps - lengths[g]
            if fused is None:
                projected[g] = ops.pad(
                    projected[g], ((0, extra), (0, 0), (0, 0))
                )
            mask = ops.pad(ops.cast(mask, "int32"), ((0, extra), (0, 0)))
            mask = ops.cast(mask, "bool")
        time_masks.append(mask)
    loop_inputs = (
        ops.stack([ops.cast(s, dtype) for s in initial_states], axis=0),
        ops.stack([variable(c.recurrent_kernel) for c in cells], axis=0),
        ops.stack([variable(c.bias)[1][None] for c in cells], axis=0),
        ops.stack(time_masks, axis=1)[..., None],
    )
    if fused is None:
        states, final = _recurrence(ops.stack(projected, axis=1), *loop_inputs)
    else:
        distinct = []
        for x in inputs:
            if not any(x is y for y in distinct):
                distinct.append(x)
        sources = [
            next(i for i, y in enumerate(distinct) if x is y) for x in inputs
        ]
        states, final = fused(
            distinct,
            sources,
            [variable(c.kernel) for c in cells],
            [variable(c.bias)[0] for c in cells],
            reverse,
            *loop_inputs,
        )
    outputs = []
    for g in range(len(layers)):
        # (t, batch, units) in the layer's processing order.
        seq, step_mask = states[:, g], time_masks[g][..., None]
        if lengths[g] != steps:
            seq, step_mask = seq[: lengths[g]], step_mask[: lengths[g]]
        if zero_output[g]:
            out = ops.where(step_mask, seq, 0.0)
        else:
            seen = ops.cumsum(ops.cast(step_mask, "int32"), axis=0) > 0
            out = ops.where(seen, seq, 0.0)
        if reverse[g]:
            out = ops.flip(out, axis=0)
        outputs.append(ops.transpose(out, (1, 0, 2)))
    return outputs, [final[g] for g in range(len(layers))]
