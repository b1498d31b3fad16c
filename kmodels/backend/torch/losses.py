"""torch side of `kmodels.backend.losses`."""

import threading
import weakref

import torch


def sparse_cross_entropy(labels, logits):
    # On 2-D logits the classes are the last, contiguous axis (moving them
    # to axis 1 of 3-D logits, as `cross_entropy` wants, copied them and
    # ran a strided softmax: 39 against 14 ms, value and gradient of
    # (64, 20, 5000) logits).
    loss = _SparseCrossEntropy.apply(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long()
    )
    return loss.reshape(labels.shape)


class _SparseCrossEntropy(torch.autograd.Function):
    """`cross_entropy(logits, labels, reduction="none")` with one pass of
    `exp` over the logits and one logits-sized tensor, forward and
    backward together: the forward pass keeps `exp(logits - max)` and its
    row sums, and the backward pass scales it in place into the gradient
    (the softmax times the upstream gradient, minus it at the label).
    torch's own (`log_softmax`, `nll_loss`) runs `exp` twice and writes
    three logits-sized tensors (the log-probabilities, a zero-filled
    scatter target, the gradient), each fresh one paying its page faults
    on the CPU: value and gradient of (64, 20, 5000) logits took 82.4
    against 53.3 ms (one thread, alternated in one process, median of 15,
    busy machine)."""

    @staticmethod
    def forward(ctx, logits, labels):
        top = logits.amax(dim=1, keepdim=True)
        exps = torch.sub(logits, top).exp_()
        sums = exps.sum(dim=1, keepdim=True)
        picked = logits.gather(1, labels[:, None])
        loss = (top + sums.log()).sub_(picked).squeeze(1)
        ctx.save_for_backward(logits, top, sums, labels)
        # Not saved through autograd: the first backward pass turns it
        # into the gradient in place (no second logits-sized allocation
        # and its page faults); a second one (`retain_graph=True`)
        # recomputes it from the saved logits.
        ctx.exps = exps
        return loss

    @staticmethod
    def backward(ctx, upstream):
        logits, top, sums, labels = ctx.saved_tensors
        exps, ctx.exps = ctx.exps, None
        if exps is None:
            exps = torch.sub(logits, top).exp_()
        upstream = upstream[:, None]
        grad = exps.mul_(upstream / sums)
        grad.scatter_add_(1, labels[:, None], -upstream)
        return grad, None


def projected_cross_entropy(labels, features, kernel, bias, label_smoothing):
    return _ProjectedCrossEntropy.apply(
        features, kernel, bias, labels.reshape(-1).long(), label_smoothing
    )


class _ProjectedCrossEntropy(torch.autograd.Function):
    """`sparse_cross_entropy(labels, features @ kernel + bias)` (label
    smoothed) on 2-D features, with one logits-sized tensor over the
    forward and the backward pass: `addmm` writes the logits with the bias
    added, `exp(logits - max)` overwrites them, and the backward pass turns
    them into the logits' gradient in place before its two products.
    Apart, the bias add and `logits - max` each wrote a fresh
    logits-sized tensor and paid its page faults: 17 ms each of a 200 ms
    Seq2Seq step (941 x 5000 logits, torch profiler, two threads)."""

    @staticmethod
    def forward(ctx, features, kernel, bias, labels, smoothing):
        logits, lease = _logits_workspace(features, kernel)
        torch.addmm(bias, features, kernel, out=logits)
        top = logits.amax(dim=1, keepdim=True)
        picked = logits.gather(1, labels[:, None])
        if smoothing:
            mean = logits.mean(dim=1, keepdim=True)
        exps = logits.sub_(top).exp_()
        sums = exps.sum(dim=1, keepdim=True)
        lse = sums.log().add_(top)
        loss = lse - picked
        if smoothing:
            loss = (1.0 - smoothing) * loss + smoothing * (lse - mean)
        ctx.save_for_backward(features, kernel, bias, top, sums, labels)
        ctx.smoothing = smoothing
        # As in `_SparseCrossEntropy`: not saved through autograd, turned
        # into the gradient by the first backward pass; a second one
        # (`retain_graph=True`) recomputes it.
        ctx.exps = exps
        ctx.lease = lease
        return loss.squeeze(1)

    @staticmethod
    def backward(ctx, upstream):
        features, kernel, bias, top, sums, labels = ctx.saved_tensors
        exps, ctx.exps = ctx.exps, None
        if exps is None:
            exps = torch.addmm(bias, features, kernel).sub_(top).exp_()
        smoothing = ctx.smoothing
        upstream = upstream[:, None]
        # softmax * upstream, then minus the (smoothed) target's share.
        grad = exps.mul_(upstream / sums)
        if smoothing:
            grad.sub_(upstream * (smoothing / kernel.shape[1]))
            upstream = upstream * (1.0 - smoothing)
        grad.scatter_add_(1, labels[:, None], -upstream)
        d_features = d_kernel = d_bias = None
        if ctx.needs_input_grad[0]:
            d_features = grad @ kernel.T
        if ctx.needs_input_grad[1]:
            d_kernel = features.T @ grad
        if ctx.needs_input_grad[2]:
            d_bias = grad.sum(dim=0)
        # The workspace is free again.
        ctx.lease = None
        return d_features, d_kernel, d_bias, None, None


_held = threading.local()


class _Lease:
    """Held by an autograd context while the workspace holds its logits:
    the workspace is free once it is dropped (after the backward pass, or
    with the graph)."""


def _logits_workspace(features, kernel):
    """A `(rows, vocab)` tensor for the logits, and its lease (or None).

    On the CPU each thread keeps one buffer (as large as its largest
    logits so far: 19 MB for 941 x 5000) for the next step, free when no
    autograd context holds its lease; a fresh tensor when it is in use
    (two losses before a backward pass). A fresh logits-sized tensor pays
    its page faults: `addmm` copying the bias into a fresh (941, 5000)
    output took 17.9 ms of the Seq2Seq step (torch profiler, one thread;
    the product itself 56 ms)."""
    rows, vocab = features.shape[0], kernel.shape[1]
    shape = (rows, vocab)
    if features.device.type != "cpu":
        return features.new_empty(shape), None
    buffer, lease = getattr(_held, "workspace", (None, lambda: None))
    if lease() is not None:
        return features.new_empty(shape), None
    if (
        buffer is None
        or buffer.dtype != features.dtype
        or buffer.numel() < rows * vocab
    ):
        buffer = features.new_empty((rows * vocab,))
    lease = _Lease()
    _held.workspace = (buffer, weakref.ref(lease))
    return buffer[: rows * vocab].view(shape), lease


def real_positions(mask):
    return torch.nonzero(mask).reshape(-1)
