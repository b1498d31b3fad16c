"""Cross-entropy of integer labels against logits, per position.

Each backend's fastest form: TensorFlow's fused
`sparse_softmax_cross_entropy_with_logits` (the softmax of the forward pass
is the gradient; no logits-sized scatter in the backward pass), torch's
`cross_entropy`, and on JAX `log_softmax` then the label's entry (XLA fuses
it; Keras' JAX loss builds a one-hot tensor).
"""

from kmodels.backend import native


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
