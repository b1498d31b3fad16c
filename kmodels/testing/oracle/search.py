"""Sequence scores, beam search and exhaustive search over the NumPy
seq2seq decoder (`kmodels.testing.oracle.seq2seq`), in float64.

The decoding contract is `Translator.generate`'s: the decoder is fed
`start_id` first; the padding id 0 is never generated; a sequence ends
with `end_id`, which the returned ids write as 0, as everything after it.
A sequence's score is its log-probability: the sum of
`log softmax(logits)` (the padding id excluded from the softmax) of its
ids up to and including the end id; a sequence cut at `max_length` without
an end id sums its `max_length` ids.

Beam search (Graves, 2012; Sutskever et al., 2014) keeps, at each step, the
`num_beams` best of all one-id extensions of the kept hypotheses; a
hypothesis that has ended stays one candidate with an unchanged score (it
can only be extended by padding). With `num_beams` at least the number of
hypotheses the search can form, it is exact; `exhaustive_search`
enumerates every sequence instead.
"""

import itertools

import numpy as np

from kmodels.testing.oracle.seq2seq import seq2seq_decoder
from kmodels.testing.oracle.seq2seq import seq2seq_encoder


def _log_probs(logits):
    """`log softmax` over every id but the padding id 0 (which gets
    `-inf`), in float64."""
    logits = np.asarray(logits, "float64").copy()
    logits[..., 0] = -np.inf
    top = logits.max(axis=-1, keepdims=True)
    shifted = logits - top
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class _Row:
    """One context row: the decoder step from a given state."""

    def __init__(self, context, context_mask, decoder_weights):
        self.context = context
        self.context_mask = context_mask
        self.weights = decoder_weights

    def step(self, token, state):
        """`(log_probs (vocab,), state (1, units), attention (s,))` after
        feeding `token` from `state`."""
        logits, state, attention = seq2seq_decoder(
            self.context,
            self.context_mask,
            np.array([[token]]),
            self.weights,
            state=state,
        )
        return _log_probs(logits[0, 0]), state, attention[0, 0]


def _rows(context_tokens, encoder_weights, decoder_weights):
    tokens = np.asarray(context_tokens)
    context = seq2seq_encoder(tokens, encoder_weights)
    return [
        _Row(context[i : i + 1], tokens[i : i + 1] != 0, decoder_weights)
        for i in range(tokens.shape[0])
    ]


def _as_ids(sequence, max_length, end_id):
    """The generated ids as `generate` writes them: the end id and what
    follows become 0."""
    ids = np.zeros(max_length, "int32")
    for i, token in enumerate(sequence):
        if token == end_id:
            break
        ids[i] = token
    return ids


def score_sequences(
    context_tokens, ids, encoder_weights, decoder_weights, start_id, end_id
):
    """Teacher-forced scores and attention of given outputs.

    Args:
        context_tokens: int `(batch, s)`.
        ids: int `(batch, max_length)` in `generate`'s format: a row whose
            first 0 is at position `n < max_length` ended there with
            `end_id`.
        encoder_weights, decoder_weights: the oracle's weight lists.
        start_id, end_id: ints.

    Returns:
        `(scores (batch,), attention (batch, max_length, s))`, attention
        zero at the end position and after, as `generate` returns it.
    """
    ids = np.asarray(ids)
    rows = _rows(context_tokens, encoder_weights, decoder_weights)
    scores = np.zeros(ids.shape[0])
    attention = np.zeros(ids.shape + (np.asarray(context_tokens).shape[1],))
    for b, row in enumerate(rows):
        token, state = start_id, None
        for i in range(ids.shape[1]):
            log_probs, state, weights = row.step(token, state)
            token = int(ids[b, i])
            if token == 0:
                scores[b] += log_probs[end_id]
                break
            scores[b] += log_probs[token]
            attention[b, i] = weights
    return scores, attention


def beam_search(
    context_tokens,
    encoder_weights,
    decoder_weights,
    start_id,
    end_id,
    max_length,
    num_beams,
):
    """Beam search; `num_beams=1` is greedy decoding.

    Returns:
        `(ids (batch, k, max_length), scores (batch, k))`, the `k <=
        num_beams` kept hypotheses of each row sorted by score, best first
        (`k` is the smallest count over rows).
    """
    rows = _rows(context_tokens, encoder_weights, decoder_weights)
    all_ids, all_scores = [], []
    for row in rows:
        # (score, sequence, state, ended)
        beams = [(0.0, (), None, False)]
        for _ in range(max_length):
            candidates = []
            for score, sequence, state, ended in beams:
                if ended:
                    candidates.append((score, sequence, state, True))
                    continue
                token = sequence[-1] if sequence else start_id
                log_probs, new_state, _ = row.step(token, state)
                for v in range(1, log_probs.shape[0]):
                    candidates.append(
                        (
                            score + log_probs[v],
                            sequence + (v,),
                            new_state,
                            v == end_id,
                        )
                    )
            candidates.sort(key=lambda c: -c[0])
            beams = candidates[:num_beams]
        all_ids.append([_as_ids(b[1], max_length, end_id) for b in beams])
        all_scores.append([b[0] for b in beams])
    k = min(len(s) for s in all_scores)
    return (
        np.array([i[:k] for i in all_ids]),
        np.array([s[:k] for s in all_scores]),
    )


def exhaustive_search(
    context_tokens,
    encoder_weights,
    decoder_weights,
    start_id,
    end_id,
    max_length,
):
    """The highest-scoring sequence of each row among all sequences of at
    most `max_length` ids (ended by `end_id`, or cut at `max_length`):
    `(vocab - 1) ** max_length` paths at most, for tiny models only.

    Returns:
        `(ids (batch, max_length), scores (batch,))`.
    """
    rows = _rows(context_tokens, encoder_weights, decoder_weights)
    vocabulary = len(decoder_weights[-1])
    best_ids, best_scores = [], []
    for row in rows:
        best = (-np.inf, ())
        for length in range(1, max_length + 1):
            for sequence in itertools.product(
                range(1, vocabulary), repeat=length
            ):
                # Only the last id may be the end id; a shorter sequence
                # must end with it.
                if end_id in sequence[:-1]:
                    continue
                if length < max_length and sequence[-1] != end_id:
                    continue
                token, state, score = start_id, None, 0.0
                for v in sequence:
                    log_probs, state, _ = row.step(token, state)
                    score += log_probs[v]
                    token = v
                if score > best[0]:
                    best = (score, sequence)
        best_ids.append(_as_ids(best[1], max_length, end_id))
        best_scores.append(best[0])
    return np.array(best_ids), np.array(best_scores)
