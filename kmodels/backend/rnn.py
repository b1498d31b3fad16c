"""When a recurrent layer may skip its mask.

torch's GRU has a fused kernel only without a mask; with one, Keras falls
back to a slow per-step loop. On a right-padded batch (every row real
tokens then padding) `Encoder` and `Decoder` can run their GRUs without
the mask and get the same results at the real positions.
"""

from kmodels.backend import native


def is_eager_right_padded(mask):
    """True on torch (eager) when every row of the boolean `(batch, s)`
    `mask` is real tokens then padding.

    Only torch benefits (its GRU has a fused kernel without a mask only);
    TensorFlow and JAX trace `call`, where the values are unknown, and
    return False, as torch does for a traced mask (`torch.compile`).
    """
    return native.rnn.is_eager_right_padded(mask)
