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

Constraints (`Translator.generate`'s, written here from their definitions,
one sequence at a time): an id is refused when it is banned, when it is the
end id before the `min_length`-th position, when it would complete an
n-gram of `no_repeat_ngram_size` ids that the sequence holds already, or
when it is not the `prefix` id of its position (the first `len(prefix)`
positions). Refused ids are removed; the others keep their
log-probabilities. `repetition_penalty` (CTRL) changes the logits before
the softmax: the logit of an id the sequence holds already is divided by
the penalty if positive, multiplied by it otherwise, and the scores are
those of the penalised distribution. A finished sequence is ranked by
`score / len(sequence) ** length_penalty` (its ids, the end id included),
which is the score returned.
"""

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

    def step(self, token, state, sequence=(), repetition_penalty=1.0):
        """`(log_probs (vocab,), state (1, units), attention (s,))` after
        feeding `token` from `state`, the generated ids so far `sequence`
        (read by the repetition penalty)."""
        logits, state, attention = seq2seq_decoder(
            self.context,
            self.context_mask,
            np.array([[token]]),
            self.weights,
            state=state,
        )
        logits = _penalised(logits[0, 0], sequence, repetition_penalty)
        return _log_probs(logits), state, attention[0, 0]


def _penalised(logits, sequence, penalty):
    """CTRL's repetition penalty: each id of `sequence`'s logit divided by
    `penalty` if positive, else multiplied by it."""
    logits = np.asarray(logits, "float64").copy()
    for v in set(sequence):
        logits[v] = (
            logits[v] / penalty if logits[v] > 0 else logits[v] * penalty
        )
    return logits


def _allowed(sequence, token, end_id, min_length, no_repeat, banned, prefix=()):
    """Whether `token` may follow the generated ids `sequence` (a tuple)."""
    if len(sequence) < len(prefix) and token != prefix[len(sequence)]:
        return False
    if token in banned:
        return False
    if token == end_id and len(sequence) + 1 < min_length:
        return False
    if no_repeat:
        candidate = sequence + (token,)
        last = candidate[len(candidate) - no_repeat :]
        if len(candidate) >= no_repeat:
            # n-grams that end before the new one's last id.
            for j in range(len(candidate) - no_repeat):
                if candidate[j : j + no_repeat] == last:
                    return False
    return True


def _normalised(score, sequence, length_penalty):
    if length_penalty == 0.0:
        return score
    return score / len(sequence) ** length_penalty


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
    context_tokens,
    ids,
    encoder_weights,
    decoder_weights,
    start_id,
    end_id,
    repetition_penalty=1.0,
):
    """Teacher-forced scores and attention of given outputs.

    Args:
        context_tokens: int `(batch, s)`.
        ids: int `(batch, max_length)` in `generate`'s format: a row whose
            first 0 is at position `n < max_length` ended there with
            `end_id`.
        encoder_weights, decoder_weights: the oracle's weight lists.
        start_id, end_id: ints.
        repetition_penalty: float, the penalty the scores are taken under.

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
            log_probs, state, weights = row.step(
                token, state, tuple(ids[b, :i]), repetition_penalty
            )
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
    length_penalty=0.0,
    min_length=0,
    no_repeat_ngram_size=0,
    banned_ids=(),
    repetition_penalty=1.0,
    prefix=(),
):
    """Beam search; `num_beams=1` is greedy decoding (the argmax over the
    allowed ids at each step).

    The constraints remove candidates during the search, which ranks by
    summed log-probability; the final hypotheses are sorted by their
    normalised score (`length_penalty`). A hypothesis with no allowed
    extension is dropped (with one beam: the row stops, scoring `-inf`).

    Returns:
        `(ids (batch, k, max_length), scores (batch, k))`, the `k <=
        num_beams` kept hypotheses of each row sorted by score, best first
        (`k` is the smallest count over rows).
    """
    banned = frozenset(banned_ids)
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
                log_probs, new_state, _ = row.step(
                    token, state, sequence, repetition_penalty
                )
                for v in range(1, log_probs.shape[0]):
                    if not _allowed(
                        sequence,
                        v,
                        end_id,
                        min_length,
                        no_repeat_ngram_size,
                        banned,
                        tuple(prefix),
                    ):
                        continue
                    candidates.append(
                        (
                            score + log_probs[v],
                            sequence + (v,),
                            new_state,
                            v == end_id,
                        )
                    )
            candidates.sort(key=lambda c: -c[0])
            if not candidates:
                # No allowed id: the (single) hypothesis stops at -inf.
                candidates = [(-np.inf, beams[0][1], None, True)]
            beams = candidates[:num_beams]
        finished = sorted(
            ((_normalised(b[0], b[1], length_penalty), b[1]) for b in beams),
            key=lambda b: -b[0],
        )
        all_ids.append([_as_ids(b[1], max_length, end_id) for b in finished])
        all_scores.append([b[0] for b in finished])
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
    length_penalty=0.0,
    min_length=0,
    no_repeat_ngram_size=0,
    banned_ids=(),
    repetition_penalty=1.0,
    prefix=(),
):
    """The highest-scoring sequence of each row among all sequences of at
    most `max_length` ids (ended by `end_id`, or cut at `max_length`) that
    the constraints allow, ranked by normalised score: a depth-first walk
    over every prefix (each decoder step computed once), at most
    `(vocab - 1) ** max_length` paths, for tiny models only.

    Returns:
        `(ids (batch, max_length), scores (batch,))`.
    """
    rows = _rows(context_tokens, encoder_weights, decoder_weights)
    vocabulary = len(decoder_weights[-1])
    banned = frozenset(banned_ids)
    best_ids, best_scores = [], []
    for row in rows:
        best = [-np.inf, ()]

        def walk(sequence, token, state, score, row=row, best=best):
            log_probs, state, _ = row.step(
                token, state, sequence, repetition_penalty
            )
            for v in range(1, vocabulary):
                if not _allowed(
                    sequence,
                    v,
                    end_id,
                    min_length,
                    no_repeat_ngram_size,
                    banned,
                    tuple(prefix),
                ):
                    continue
                extended = sequence + (v,)
                total = score + log_probs[v]
                if v == end_id or len(extended) == max_length:
                    ranked = _normalised(total, extended, length_penalty)
                    if ranked > best[0]:
                        best[:] = [ranked, extended]
                else:
                    walk(extended, v, state, total)

        walk((), start_id, None, 0.0)
        best_ids.append(_as_ids(best[1], max_length, end_id))
        best_scores.append(best[0])
    return np.array(best_ids), np.array(best_scores)
