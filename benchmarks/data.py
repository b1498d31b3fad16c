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


# The dates demo's lengths (`examples/seq2seq_dates.py`, counted on 2,000
# training pairs of `kmodels.datasets.dates.date_split(seed=0)`): sources of
# 5-8 tokens, [START] and [END] included, with these shares; every ISO
# target is 7 tokens, so `target_in` and `target_out` (6 each) have no
# padding at all.
DATES_SOURCE_LENGTHS = {5: 0.1645, 6: 0.167, 7: 0.4905, 8: 0.178}
DATES_TARGET_LENGTH = 6


def dates_batch(sizes, seed=0):
    """`((context, target_in), target_out)` with the dates demo's lengths
    (`DATES_SOURCE_LENGTHS`, targets unpadded), ids drawn uniformly."""
    rng = np.random.default_rng(seed)
    batch = sizes["batch"]
    lengths = rng.choice(
        list(DATES_SOURCE_LENGTHS),
        size=batch,
        p=list(DATES_SOURCE_LENGTHS.values()),
    )
    s = sizes["source_length"]
    context = rng.integers(4, sizes["vocabulary"], size=(batch, s))
    context[np.arange(s)[None, :] >= lengths[:, None]] = 0
    t = DATES_TARGET_LENGTH
    body = rng.integers(
        4, sizes["target_vocabulary"], size=(batch, t - 1)
    ).astype("int32")
    target_in = np.concatenate(
        [np.full((batch, 1), START_ID, "int32"), body], axis=1
    )
    target_out = np.concatenate(
        [body, np.full((batch, 1), END_ID, "int32")], axis=1
    )
    return (context.astype("int32"), target_in), target_out
