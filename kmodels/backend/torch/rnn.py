"""torch side of `kmodels.backend.rnn`."""

import numpy as np
import torch
from keras import ops


def is_eager_right_padded(mask):
    try:
        m = np.asarray(ops.convert_to_numpy(mask))
    except Exception:  # traced (e.g. torch.compile): keep the masked path
        return False
    lengths = m.sum(axis=1, keepdims=True)
    return bool(np.all(m == (np.arange(m.shape[1])[None, :] < lengths)))


def prefers_one_recurrence():
    # On CUDA, right-padded batches run cuDNN's kernel through Keras' GRU
    # (`is_eager_right_padded`).
    return not torch.cuda.is_available()


def prefers_one_model_recurrence():
    # Eager: one Python loop of 20 steps instead of two.
    return prefers_one_recurrence()


def gru_recurrence():
    return _recurrence


def _recurrence(x_proj, h0, kernel, recurrent_bias, mask):
    dtype = x_proj.dtype
    if x_proj.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16):
        # Half-precision products on a CPU without bfloat16 instructions
        # take a generic kernel: a (3, 64, 256) x (3, 256, 768) `baddbmm`
        # took 61 ms in bfloat16 against 1.1 ms in float32 with the casts.
        # The loop runs in float32; its outputs are cast back.
        states, final = _GRURecurrence.apply(
            x_proj.float(),
            h0.float(),
            kernel.float(),
            recurrent_bias.float(),
            mask,
        )
        return states.to(dtype), final.to(dtype)
    return _GRURecurrence.apply(x_proj, h0, kernel, recurrent_bias, mask)


class _GRURecurrence(torch.autograd.Function):
    """`kmodels.seq2seq.gru`'s stacked recurrence in torch operations: one
    `baddbmm` and six elementwise kernels per step forward, one `baddbmm`
    and about twenty small elementwise kernels per step backward, writing
    into preallocated buffers (Keras' per-operation overhead in an eager
    loop cost more than the arithmetic: 58 ms against 23 ms for a 20-step
    bidirectional forward pass, batch 64, units 256). The backward pass
    recomputes its per-step factors from the saved gates: small tensors
    that stay in cache, where precomputing them for every step at once
    cost more memory traffic."""

    @staticmethod
    def forward(ctx, x_proj, h0, kernel, recurrent_bias, mask):
        states, final, saved = _loop_forward(
            x_proj, h0, kernel, recurrent_bias, mask
        )
        if any(ctx.needs_input_grad):
            ctx.save_for_backward(*saved)
        return states, final

    @staticmethod
    def backward(ctx, d_states, d_final):
        d_x, dh, d_kernel, d_bias = _loop_backward(
            ctx.saved_tensors, d_states, d_final, group_major=False
        )
        return d_x, dh, d_kernel, d_bias, None


def _loop_forward(x_proj, h0, kernel, recurrent_bias, mask):
    """The recurrence over time-major `x_proj` `(t, g, batch, 3u)` (any
    strides: `_ProjectedGRURecurrence` passes a group-major buffer's
    transposed view). Returns the states `(t, g, batch, u)`, the final
    states and the tensors `_loop_backward` reads."""
    units = h0.shape[-1]
    steps = x_proj.shape[0]
    shape = tuple(h0.shape)
    groups = shape[0]
    # Each group's initial state, then its states, one after the other:
    # the backward pass reads every step's previous state as one
    # (steps x batch, units) matrix per group, without a copy.
    history = x_proj.new_empty((groups, steps + 1) + shape[1:])
    history[:, 0] = h0
    states = history[:, 1:].transpose(0, 1)
    # z and r, then the candidate n, then the recurrent product
    # `h @ recurrent_kernel + bias` of every step.
    gates = x_proj.new_empty((steps,) + shape[:-1] + (2 * units,))
    candidates = x_proj.new_empty((steps,) + shape)
    inners = x_proj.new_empty((steps,) + shape[:-1] + (3 * units,))
    h = history[:, 0]
    for t in range(steps):
        inner = torch.baddbmm(recurrent_bias, h, kernel, out=inners[t])
        zr = torch.add(
            x_proj[t, ..., : 2 * units], inner[..., :-units], out=gates[t]
        ).sigmoid_()
        n = torch.addcmul(
            x_proj[t, ..., 2 * units :],
            zr[..., units:],
            inner[..., -units:],
            out=candidates[t],
        ).tanh_()
        # n + z * (h - n) at real steps; h carried over elsewhere.
        h = torch.where(
            mask[t], torch.lerp(n, h, zr[..., :units]), h, out=states[t]
        )
    return states, h, (history, gates, candidates, inners, mask, kernel)


def _loop_backward(saved, d_states, d_final, group_major):
    """Gradients of `_loop_forward`'s inputs: `d_x` (group-major
    `(g, t, batch, 3u)` or time-major), the initial states', the recurrent
    kernels' and biases'."""
    history, gates, candidates, inners, mask, kernel = saved
    groups, steps, batch, units = history.shape
    steps -= 1
    kernel_t = kernel.transpose(1, 2)
    # (groups, steps, batch, 3u): the kernel's and the bias's gradients
    # are then one product and one sum over contiguous rows, and so are
    # the input projections' (`_ProjectedGRURecurrence`).
    d_inner = history.new_empty((groups, steps, batch, 3 * units))
    if group_major:
        d_x = history.new_empty((groups, steps, batch, 3 * units))
        steps_x = d_x.transpose(0, 1)
    else:
        d_x = steps_x = history.new_empty((steps, groups, batch, 3 * units))
    weights = mask.to(history.dtype)
    dh = d_final
    for t in range(steps - 1, -1, -1):
        previous = history[:, t]
        z, r = gates[t, ..., :units], gates[t, ..., units:]
        n = candidates[t]
        d_state = dh + d_states[t]
        real = d_state * weights[t]
        one_minus_z = 1.0 - z
        d_n = torch.mul(
            real * one_minus_z,
            1.0 - n * n,
            out=steps_x[t, ..., 2 * units :],
        )
        d_z = torch.mul(
            real * (previous - n),
            z * one_minus_z,
            out=d_inner[:, t, :, :units],
        )
        d_r = torch.mul(
            d_n * inners[t, ..., 2 * units :],
            r * (1.0 - r),
            out=d_inner[:, t, :, units : 2 * units],
        )
        torch.mul(d_n, r, out=d_inner[:, t, :, 2 * units :])
        steps_x[t, ..., :units] = d_z
        steps_x[t, ..., units : 2 * units] = d_r
        # At a real step the state's gradient goes on through z and the
        # recurrent kernel; at a padded one it is carried over.
        carried = d_state - real * one_minus_z
        dh = torch.baddbmm(carried, d_inner[:, t], kernel_t)
    previous = history[:, :-1].reshape(groups, steps * batch, units)
    flat_inner = d_inner.reshape(groups, steps * batch, 3 * units)
    d_kernel = torch.bmm(previous.transpose(1, 2), flat_inner)
    d_bias = flat_inner.sum(dim=1, keepdim=True)
    return d_x, dh, d_kernel, d_bias


def gru_projected_recurrence(x):
    # The half-precision path casts the loop to float32 (`_recurrence`);
    # its input projections stay Keras' (`kmodels.seq2seq.gru`), as for a
    # Keras variable given as the input.
    if isinstance(x, torch.Tensor) and x.dtype in (
        torch.float32,
        torch.float64,
    ):
        return _projected_recurrence
    return None


def _projected_recurrence(
    inputs, sources, kernels, biases, reverse, h0, kernel, recurrent_bias, mask
):
    meta = (tuple(sources), tuple(bool(r) for r in reverse), len(inputs))
    return _ProjectedGRURecurrence.apply(
        meta, h0, kernel, recurrent_bias, mask, *inputs, *kernels, *biases
    )


class _ProjectedGRURecurrence(torch.autograd.Function):
    """The input projections and `_GRURecurrence` in one function, the
    projected inputs in one group-major `(g, t, batch, 3u)` buffer: one
    `addmm` per group writes its `(t x batch, 3u)` block with the input
    bias, the reversed direction projecting its input read last step
    first. Through `keras.ops` (`kmodels.seq2seq.gru`) the same step took
    a product, a bias add into a fresh tensor, a flip and a stack of the
    groups' projections forward, and their unstack, flip and concatenation
    backward: about 40 MB of fresh tensors per Seq2Seq train step. The
    backward pass reads each group's gradient as one block too: one
    product each for its input's, its kernel's gradient, one sum for its
    bias's."""

    @staticmethod
    def forward(ctx, meta, h0, kernel, recurrent_bias, mask, *tensors):
        sources, reverse, count = meta
        groups = len(sources)
        inputs = tensors[:count]
        kernels = tensors[count : count + groups]
        biases = tensors[count + groups :]
        steps = mask.shape[0]
        batch, units = h0.shape[1], h0.shape[2]
        x_proj = h0.new_empty((groups, steps, batch, 3 * units))
        # Each input time-major (and reversed where a group reads it
        # backwards) as one (t x batch, features) matrix, once.
        ordered = {}
        rows = []
        for g, (s, back) in enumerate(zip(sources, reverse)):
            if (s, back) not in ordered:
                x = inputs[s].transpose(0, 1)
                ordered[s, back] = (x.flip(0) if back else x).contiguous()
            x = ordered[s, back]
            length = x.shape[0]
            rows.append(x.reshape(length * batch, -1))
            torch.addmm(
                biases[g],
                rows[g],
                kernels[g],
                out=x_proj[g, :length].view(length * batch, 3 * units),
            )
            if length < steps:
                # Steps after the group's own: state carried over.
                x_proj[g, length:].zero_()
        states, final, saved = _loop_forward(
            x_proj.transpose(0, 1), h0, kernel, recurrent_bias, mask
        )
        if any(ctx.needs_input_grad):
            ctx.save_for_backward(*saved, *rows, *kernels)
            ctx.meta = meta
        return states, final

    @staticmethod
    def backward(ctx, d_states, d_final):
        sources, reverse, count = ctx.meta
        groups = len(sources)
        saved = ctx.saved_tensors
        rows, kernels = saved[6 : 6 + groups], saved[6 + groups :]
        d_x, dh, d_kernel, d_bias = _loop_backward(
            saved[:6], d_states, d_final, group_major=True
        )
        batch = d_x.shape[2]
        wanted = ctx.needs_input_grad
        d_inputs = [None] * count
        d_kernels = [None] * groups
        d_biases = [None] * groups
        for g, (s, back) in enumerate(zip(sources, reverse)):
            length = rows[g].shape[0] // batch
            block = d_x[g, :length].reshape(length * batch, -1)
            if wanted[5 + count + g]:
                d_kernels[g] = rows[g].T @ block
            if wanted[5 + count + groups + g]:
                d_biases[g] = block.sum(dim=0)
            if wanted[5 + s]:
                d_in = (block @ kernels[g].T).view(length, batch, -1)
                if back:
                    d_in = d_in.flip(0)
                d_in = d_in.transpose(0, 1)
                if d_inputs[s] is None:
                    d_inputs[s] = d_in
                else:
                    d_inputs[s] = d_inputs[s] + d_in
        return (
            None,
            dh if wanted[1] else None,
            d_kernel if wanted[2] else None,
            d_bias if wanted[3] else None,
            None,
            *d_inputs,
            *d_kernels,
            *d_biases,
        )


def scan(f, init, xs, reverse=False):
    carry = init
    ys = []
    steps = list(zip(*(torch.unbind(x, 0) for x in xs)))
    for x in reversed(steps) if reverse else steps:
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    return carry, tuple(torch.stack(y) for y in zip(*ys))


def custom_gradient(forward, backward, output_shapes):
    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            outputs, residuals = forward(*inputs)
            # Intermediate tensors may be saved too (torch >= 2.0); saving
            # them on `ctx` would make a reference cycle with the outputs.
            ctx.save_for_backward(*residuals)
            return tuple(outputs)

        @staticmethod
        def backward(ctx, *gradients):
            # Unused outputs arrive as zeros (`set_materialize_grads`).
            return tuple(backward(ctx.saved_tensors, gradients))

    return Function.apply
