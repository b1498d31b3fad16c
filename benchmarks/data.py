"""Synthetic inputs: right-padded token batches with real masks (NumPy)."""

import numpy as np

START_ID = 2
END_ID = 3


def padded_tokens(rng, batch, length, vocabulary, min_length=None):
    """`(batch, length)` int32 ids in `[4, vocabulary)`, each row's tail
    padded with 0 after a random length in `[min_length, length]` (default
    `length // 2`, at least 1). Ids 1-3 are left free for OOV/start/end."""
    if min_length is None:
        min_length = max(1, length // 2)
    ids = rng.integers(4, vocabulary, size=(batch, length)).astype("int32")
    lengths = rng.integers(min_length, length + 1, size=batch)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
    # One full-length row, so the padded batch keeps its nominal shape.
    ids[0] = rng.integers(4, vocabulary, size=length)
    return ids


def seq2seq_batch(sizes, seed=0):
    """`((context, target_in), target_out)` as in the tutorial: target_in
    starts with START_ID, target_out ends with END_ID, both padded with 0."""
    rng = np.random.default_rng(seed)
    context = padded_tokens(
        rng, sizes["batch"], sizes["source_length"], sizes["vocabulary"]
    )
    body = padded_tokens(
        rng, sizes["batch"], sizes["target_length"] - 1, sizes["vocabulary"]
    )
    lengths = (body != 0).sum(axis=1)
    batch, t = body.shape
    target_in = np.zeros((batch, t + 1), "int32")
    target_out = np.zeros((batch, t + 1), "int32")
    target_in[:, 0] = START_ID
    target_in[:, 1:] = body
    target_out[:, :t] = body
    target_out[np.arange(batch), lengths] = END_ID
    return (context, target_in), target_out
