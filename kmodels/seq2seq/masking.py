"""Explicit padding masks for the seq2seq layers.

Keras 3 carries masks as metadata on tensors, and some layers edit that
metadata in place: `MultiHeadAttention.call` deletes the mask of its `value`,
so a context tensor used twice loses its padding mask on the second call.
The seq2seq layers therefore compute masks from token ids (id 0 is padding)
and pass them explicitly; these helpers keep the Keras metadata of the
caller's tensors unchanged.
"""

import contextlib

from keras import ops

from kmodels.backend.keras_internals import get_keras_mask
from kmodels.backend.keras_internals import set_keras_mask

PAD_ID = 0


def padding_mask(tokens):
    """`tokens != 0` as a boolean tensor."""
    return ops.not_equal(tokens, PAD_ID)


@contextlib.contextmanager
def masks_hidden(*tensors):
    """Hides the Keras masks of `tensors` for the duration of the block and
    restores them afterwards, even when a sublayer deletes them."""
    saved = [get_keras_mask(t) for t in tensors]
    for t in tensors:
        set_keras_mask(t, None)
    try:
        yield
    finally:
        for t, m in zip(tensors, saved):
            set_keras_mask(t, m)


def without_mask(x):
    """Drops the Keras mask attached to `x` (a tensor this code created)."""
    set_keras_mask(x, None)
    return x
