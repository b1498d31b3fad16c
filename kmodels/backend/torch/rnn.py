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
        units = h0.shape[-1]
        steps = x_proj.shape[0]
        shape = tuple(h0.shape)
        groups = shape[0]
        # Each group's initial state, then its states, one after the
        # other: the backward pass reads every step's previous state as
        # one (steps x batch, units) matrix per group, without a copy.
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
        if any(ctx.needs_input_grad):
            ctx.save_for_backward(
                history, gates, candidates, inners, mask, kernel
            )
        return states, h

    @staticmethod
    def backward(ctx, d_states, d_final):
        history, gates, candidates, inners, mask, kernel = ctx.saved_tensors
        groups, steps, batch, units = history.shape
        steps -= 1
        kernel_t = kernel.transpose(1, 2)
        # (groups, steps, batch, 3u): the kernel's and the bias's gradients
        # are then one product and one sum over contiguous rows.
        d_inner = history.new_empty((groups, steps, batch, 3 * units))
        d_x = history.new_empty((steps, groups, batch, 3 * units))
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
                out=d_x[t, ..., 2 * units :],
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
            d_x[t, ..., :units] = d_z
            d_x[t, ..., units : 2 * units] = d_r
            # At a real step the state's gradient goes on through z and
            # the recurrent kernel; at a padded one it is carried over.
            carried = d_state - real * one_minus_z
            dh = torch.baddbmm(carried, d_inner[:, t], kernel_t)
        previous = history[:, :-1].reshape(groups, steps * batch, units)
        flat_inner = d_inner.reshape(groups, steps * batch, 3 * units)
        d_kernel = torch.bmm(previous.transpose(1, 2), flat_inner)
        d_bias = flat_inner.sum(dim=1, keepdim=True)
        return d_x, dh, d_kernel, d_bias, None


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
