"""Cross-entropy of integer labels against logits, per position.

Each backend's fastest form: TensorFlow's fused
`sparse_softmax_cross_entropy_with_logits` (the softmax of the forward pass
is the gradient; no logits-sized scatter in the backward pass), torch's
`cross_entropy`, and on JAX `log_softmax` then the label's entry (XLA fuses
it; Keras' JAX loss builds a one-hot tensor).
"""

from kmodels.backend import native
from kmodels.backend import native_function


def sparse_cross_entropy(labels, logits):
    """`-log_softmax(logits)[..., label]` for each position.

    Args:
        labels: int tensor `(...)`, every value in `[0, vocab)` (the caller
            replaces the others: TensorFlow's kernel raises on them).
        logits: float tensor `(..., vocab)`.

    Returns:
        A float tensor `(...)` in the dtype of `logits`.
    """
    return native.losses.sparse_cross_entropy(labels, logits)


def projected_cross_entropy(labels, features, kernel, bias, label_smoothing):
    """`sparse_cross_entropy(labels, features @ kernel + bias)`, label
    smoothed as `MaskedLoss` does, in one backend kernel that writes the
    logits once, or None where the backend has none (the caller projects
    and calls `sparse_cross_entropy`). Only reached where
    `real_positions` is not None (torch).

    Args:
        labels: int tensor `(n,)`, every value in `[0, vocab)`.
        features: float32 `(n, units)`.
        kernel: float32 `(units, vocab)`.
        bias: float32 `(vocab,)`.
        label_smoothing: float in `[0, 1]`.

    Returns:
        A float32 tensor `(n,)`, or None.
    """
    projected = native_function("losses", "projected_cross_entropy")
    if projected is None:
        return None
    return projected(labels, features, kernel, bias, label_smoothing)


def real_positions(mask):
    """The indices of the True entries of the boolean vector `mask` (int,
    `(n_true,)`) where shapes may depend on data (torch runs eagerly), or
    None where a compiled step needs static shapes (TensorFlow, JAX).

    `kmodels.seq2seq.fused_loss` projects only those positions on torch in
    one product, and loops over chunks of the sorted positions elsewhere.
    """
    positions = native_function("losses", "real_positions")
    return None if positions is None else positions(mask)


def prefers_fused_loss():
    """True where `Translator`'s train step is faster with the fused loss
    on real positions (`fused_loss=None`, the default, follows it).
    Measured on the CPU with `benchmarks` case `seq2seq_train_fused` (the
    fused and the dense step alternated in one process, the benchmark
    batch with 26.5% padded target positions): faster on all three (see
    docs/seq2seq.md), so True on every backend; a backend or device where
    the dense step wins would define its own `prefers_fused_loss` and the
    facade ask for it with `native_function`."""
    return True
