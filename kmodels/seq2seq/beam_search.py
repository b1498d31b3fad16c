"""Beam search of a `Translator` in `keras.ops`: one `ops.while_loop`,
compiled with `generate`'s function on TensorFlow and JAX.

The search of keras-hub's `BeamSampler` at temperature 1, as
`Translator.generate(..., sampler="beam")` defines it (and as torch's
native loop, `kmodels.backend.decoding.beam_loop`, runs it): each row starts
from one real beam (score 0) and `num_beams - 1` placeholders (score
-1e9); at each step every beam is extended by every id but the padding id
0, its score plus the id's log-probability (`log_softmax` over every id
but 0), and the `num_beams` best extensions of each row are kept. A beam
that has produced the end id (or padding) is one candidate, padding, at
its unchanged score. The loop stops when every beam has ended.

What it does not do, where keras-hub's loop does at every step:

- reorder the whole cache: each step's ids, the beam each extends (its
  parent) and the attention weights are written into `(max_length, rows[,
  s])` buffers with slice updates, and only the `(rows, units)` GRU state
  (and, for a processor that reads them, the `(rows, max_length)` ids so
  far)
  follows the beams; the sequences are read back once, at the end, by
  following the parents from the last step;
- materialise `log_softmax` over `(rows, vocabulary)` and rank
  `num_beams * vocabulary` candidates per row: a row's `num_beams` best
  extensions are among its beams' `num_beams` best ids each (any other id
  has `num_beams` better candidates in its own beam), so a top-k over each
  beam's raw logits, less their log-sum-exp, then a top-k over the
  `num_beams ** 2` candidates of each row, make the same choice.

The decoder runs through `kmodels.seq2seq.decoder_step`: its keys and
values computed once on the context as given (one row per input), the
beams of a row attending to it together, so that the context is never
repeated per beam and no per-step copy lays the keys out.

`Constraints` change the logits before the log-sum-exp
(`Constraints.transform`) and remove candidates before the first top-k
(`Constraints.refuse`; the others keep the model's log-probabilities, not
renormalised).
"""

from keras import ops

from kmodels.seq2seq.decoder_step import decoder_step
from kmodels.seq2seq.sampling_loop import top_k

NEG_INF = float("-inf")
# keras-hub's initial score of the placeholder beams, and the score below
# which a beam descends from one of them.
_PLACEHOLDER = -1e9
_PLACEHOLDER_LOG_PROB = -1e8


def beam_loop(
    model,
    context,
    context_mask,
    max_length,
    num_beams,
    return_all_beams,
    constraints,
):
    """Beam search of `model` (a built `Translator`) over an encoded
    `context`; traceable (pure `keras.ops`).

    Args:
        model: a built `Translator` (its `decoder`, `start_id`, `end_id`).
        context: float `(batch, s, units)`, the encoder's output, one row
            per input (the beams are made here).
        context_mask: bool `(batch, s)`, True at real context tokens.
        max_length: int >= 1, the generated positions.
        num_beams: int >= 1.
        return_all_beams: bool. Return every beam, or the best one.
        constraints: a `kmodels.seq2seq.constraints.Constraints`: the
            candidates it refuses are never taken; the length penalty is
            the caller's (`kmodels.seq2seq.decoding.decode`).

    Returns:
        `(ids, attention, scores)` as `kmodels.backend.decoding.beam_loop`:
        with `return_all_beams`, int32 `(batch, num_beams, max_length)`,
        `(batch, num_beams, max_length, s)` and float32 `(batch,
        num_beams)`, sorted by score, best first (ties in the search's
        order), a beam descending from a placeholder at `-inf`; else the
        best beam, `(batch, max_length)`, `(batch, max_length, s)` and
        `(batch,)`.

    Example:

    >>> import numpy as np
    >>> from kmodels.seq2seq import Translator
    >>> from kmodels.seq2seq.constraints import Constraints
    >>> from kmodels.seq2seq.masking import padding_mask
    >>> model = Translator(20, 9, 8, start_id=2, end_id=3)
    >>> tokens = np.array([[4, 5, 6, 0]], "int32")
    >>> ids, attention, scores = beam_loop(
    ...     model, model.encoder(tokens), padding_mask(tokens), 5, 3,
    ...     True, Constraints())
    >>> tuple(ids.shape), tuple(attention.shape), tuple(scores.shape)
    ((1, 3, 5), (1, 3, 5, 4), (1, 3))
    """
    decoder = model.decoder
    end_id = model.end_id
    vocabulary = model.target_vocabulary_size
    dtype = model.compute_dtype
    batch, s = ops.shape(context)[0], ops.shape(context)[1]
    rows = batch * num_beams
    # The decoder's step with the context's keys and values laid out once,
    # the beams of a row attending to its context together.
    step = decoder_step(decoder, context, context_mask, num_beams)
    if step is None:
        # The beams of a row stay in that row: the context is repeated
        # once.
        step = _repeated_step(decoder, context, context_mask, num_beams)
    # Each beam's best ids: enough for the row's best extensions.
    per_beam = min(num_beams, vocabulary)
    is_pad = ops.arange(vocabulary, dtype="int32") == 0
    first = ops.arange(per_beam, dtype="int32") == 0
    offsets = ops.repeat(
        ops.arange(batch, dtype="int32") * num_beams, num_beams
    )
    history = constraints.needs_history

    def cond(i, token, state, scores, done, *buffers):
        return ops.logical_and(i < max_length, ops.logical_not(ops.all(done)))

    def body(i, token, state, scores, done, tokens, parents, weights, ids):
        logits, state, attended = step(token, state)
        # The padding id is never generated (probability 0).
        logits = ops.where(is_pad, NEG_INF, ops.cast(logits, "float32"))
        if constraints.active:
            # The transforms change the distribution scored.
            logits = constraints.transform(logits, ids, i, end_id)
        normaliser = ops.logsumexp(logits, axis=-1, keepdims=True)
        if constraints.active:
            # Refused ids are removed; the others keep their
            # log-probabilities.
            logits = constraints.refuse(logits, ids, i, end_id)
        top, index = top_k(logits, per_beam)
        candidates = top - normaliser + scores[:, None]
        # An ended beam is one candidate, padding, at its unchanged score.
        candidates = ops.where(
            done[:, None],
            ops.where(first, scores[:, None], NEG_INF),
            candidates,
        )
        index = ops.where(done[:, None], 0, ops.cast(index, "int32"))
        # The row's best extensions among its beams' best ids.
        scores, chosen = ops.top_k(
            ops.reshape(candidates, (-1, num_beams * per_beam)), num_beams
        )
        scores = ops.reshape(scores, (-1,))
        chosen = ops.cast(ops.reshape(chosen, (-1,)), "int32")
        parent = chosen // per_beam + offsets
        token = ops.take_along_axis(
            ops.reshape(index, (-1, num_beams * per_beam)),
            ops.reshape(chosen, (-1, num_beams)),
            axis=1,
        )
        token = ops.reshape(token, (-1,))
        state = ops.take(state, parent, axis=0)
        done = ops.logical_or(
            ops.take(done, parent, axis=0),
            ops.logical_or(token == end_id, token == 0),
        )
        if history:
            ids = ops.slice_update(
                ops.take(ids, parent, axis=0), [0, i], token[:, None]
            )
        tokens = ops.slice_update(tokens, [i, 0], token[None])
        parents = ops.slice_update(parents, [i, 0], parent[None])
        weights = ops.slice_update(
            weights, [i, 0, 0], ops.cast(attended, dtype)[None]
        )
        return i + 1, token, state, scores, done, tokens, parents, weights, ids

    beams = ops.arange(rows, dtype="int32")
    initial = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((rows,), model.start_id, dtype="int32"),
        ops.zeros((rows, model.units), dtype=dtype),
        # As keras-hub: one real beam per row and placeholders, so that
        # the first step extends the real one only.
        ops.tile(
            ops.convert_to_tensor(
                [0.0] + [_PLACEHOLDER] * (num_beams - 1), "float32"
            ),
            [batch],
        ),
        ops.zeros((rows,), dtype="bool"),
        ops.zeros((max_length, rows), dtype="int32"),
        # A step the loop does not run leaves each beam its own parent.
        ops.broadcast_to(beams[None], (max_length, rows)),
        ops.zeros((max_length, rows, s), dtype=dtype),
        ops.zeros((rows, max_length if history else 1), dtype="int32"),
    )
    _, _, _, scores, _, tokens, parents, weights, _ = ops.while_loop(
        cond, body, initial, maximum_iterations=max_length
    )
    ids, attention = _backtrack(tokens, parents, weights, max_length)
    # The end id and everything after it become padding, with zero
    # attention.
    ended = ops.cumsum(ops.cast(ids == end_id, "int32"), axis=1) > 0
    ids = ops.where(ended, 0, ids)
    attention = ops.where((ids != 0)[..., None], attention, 0.0)
    # A beam that descends from a placeholder is no real sequence.
    scores = ops.where(scores > _PLACEHOLDER_LOG_PROB, scores, NEG_INF)

    def split(x):
        return ops.reshape(x, (-1, num_beams) + tuple(ops.shape(x)[1:]))

    return ranked(split(ids), split(attention), split(scores), return_all_beams)


def _repeated_step(decoder, context, context_mask, num_beams):
    """`decoder_step`'s step through `decoder` itself, on the context
    repeated for each beam (a configuration `decoder_step` does not
    implement)."""
    context = ops.repeat(context, num_beams, axis=0)
    context_mask = ops.repeat(context_mask, num_beams, axis=0)

    def step(token, state):
        logits, state, weights = decoder(
            context,
            token[:, None],
            state=state,
            return_state=True,
            context_mask=context_mask,
            return_attention_weights=True,
        )
        return logits[:, 0], state, weights[:, 0]

    return step


def _backtrack(tokens, parents, weights, max_length):
    """The final beams' ids `(rows, max_length)` and attention weights
    `(rows, max_length, s)`, read from the last step back along the
    parents (`tokens` and `parents` `(max_length, rows)`, `weights`
    `(max_length, rows, s)`, in each step's beam order)."""

    def body(j, carry):
        beam, ids, attention = carry
        i = max_length - 1 - j
        token = ops.take(ops.take(tokens, i, axis=0), beam, axis=0)
        ids = ops.slice_update(ids, [i, 0], token[None])
        # The weights of the step that extended the parent beam.
        beam = ops.take(ops.take(parents, i, axis=0), beam, axis=0)
        step = ops.take(ops.take(weights, i, axis=0), beam, axis=0)
        attention = ops.slice_update(attention, [i, 0, 0], step[None])
        return beam, ids, attention

    rows = ops.shape(tokens)[1]
    _, ids, attention = ops.fori_loop(
        0,
        max_length,
        body,
        (
            ops.arange(rows, dtype="int32"),
            ops.zeros_like(tokens),
            ops.zeros_like(weights),
        ),
    )
    return ops.transpose(ids), ops.transpose(attention, (1, 0, 2))


def ranked(ids, attention, score, return_all_beams):
    """Beams `(batch, beams, ...)` sorted by `score`, best first (ties in
    the search's order); every beam, or the best one."""
    order = ops.argsort(-score, axis=1)
    score = ops.take_along_axis(score, order, axis=1)
    ids = ops.take_along_axis(ids, order[:, :, None], axis=1)
    attention = ops.take_along_axis(attention, order[:, :, None, None], axis=1)
    if return_all_beams:
        return ids, attention, score
    return ids[:, 0], attention[:, 0], score[:, 0]
