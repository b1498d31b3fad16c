"""Greedy decoding and beam search of a `kmodels.seq2seq.Decoder`,
natively where it pays.

On TensorFlow and JAX, `Translator.generate` compiles its whole Keras loop
(`tf.function` with XLA, `jax.jit`), so each step costs microseconds. On
torch the loop runs eagerly, and each step's dozen Keras layer calls cost
about 0.5 ms each in framework overhead against a few microseconds of
arithmetic: a tiny model's step took 8 ms through the layers against 1.6 ms
in `keras.ops` and 0.2 ms in torch. There, `greedy_loop` runs the same
step with torch operations on the layers' own variables (the same math as
Keras' `GRUCell` with `reset_after=True`, `MultiHeadAttention` with one
head, `LayerNormalization` and `Dense`, the attention keys and values of
the context computed once), without autograd. `beam_loop` does the same
for beam search, in place of keras-hub's `BeamSampler` loop (whose eager
bookkeeping and masks over `(batch * beams, vocabulary)` logits cost more
than the decoder's step there). Parity with the NumPy oracle and with the
Keras loop is tested (`backends_tests/backend/decoding_test.py`).
"""

from kmodels.backend import native_function


def greedy_loop(
    decoder,
    context,
    context_mask,
    start_id,
    end_id,
    max_length,
    constraints=None,
):
    """Greedy decoding of `decoder` over an encoded `context`, or None.

    The contract is the one of `Translator.generate(..., sampler="greedy")`:
    the first input id is `start_id`; at each step the padding id 0 is
    excluded and the argmax taken; a row stops at `end_id`, which is
    written as 0, as is everything after it (and the attention rows of
    those positions). The loop stops early when every row has ended.

    Args:
        decoder: a built `kmodels.seq2seq.Decoder`.
        context: float `(batch, s, units)`, the encoder's output.
        context_mask: bool `(batch, s)`, True at real context tokens.
        start_id: int, the first id fed to the decoder.
        end_id: int, the id that ends a row.
        max_length: int >= 1, the generated positions.
        constraints: a `kmodels.seq2seq.constraints.Constraints` or None,
            applied by its own processors (`transform`, then `refuse`):
            the argmax is taken over the ids it allows; a row with none
            left stops (padding) and scores `-inf`.

    Returns:
        `(ids, attention, scores)`: int32 `(batch, max_length)`, float
        `(batch, max_length, s)` and float32 `(batch,)`, the sum of the
        log-probabilities (softmax over every id but 0) of the generated
        ids up to and including the end id; or None where the backend
        compiles the Keras loop instead (TensorFlow, JAX).
    """
    loop = native_function("decoding", "greedy_loop")
    if loop is None:
        return None
    return loop(
        decoder,
        context,
        context_mask,
        start_id,
        end_id,
        max_length,
        constraints,
    )


def decoder_step(decoder, context, context_mask):
    """One decoding step of `decoder` over a fixed `context`, as a
    function, or None.

    The returned `step(token, state)` takes the previous ids `(batch,)`
    and the GRU state `(batch, units)` and returns `(logits, state,
    weights)`: float32 `(batch, vocabulary)`, the new state and the
    attention weights `(batch, s)`, the values of
    `decoder(context, token[:, None], state=state, return_state=True,
    return_attention_weights=True, context_mask=context_mask)` at a real
    (non-padding) token, without autograd. torch builds it (each
    sampler's loop runs eagerly there: keras-hub's beam, random, top-k and
    top-p samplers call it at every step); TensorFlow and JAX return None
    (the samplers' loop is compiled with the Keras layers).

    Args:
        decoder: a built `kmodels.seq2seq.Decoder`.
        context: float `(batch, s, units)`, the encoder's output.
        context_mask: bool `(batch, s)`, True at real context tokens.
    """
    step = native_function("decoding", "decoder_step")
    if step is None:
        return None
    return step(decoder, context, context_mask)


def beam_loop(
    decoder,
    context,
    context_mask,
    start_id,
    end_id,
    max_length,
    num_beams,
    return_all_beams,
    constraints=None,
):
    """Beam search over `decoder` and an encoded `context`, or None.

    The search of `Translator.generate(..., sampler="beam")`, which runs
    keras-hub's `BeamSampler` at temperature 1: each row starts from one
    real beam (score 0) and `num_beams - 1` placeholders (score -1e9); at
    each step every beam is extended by every id but the padding id 0,
    with the id's log-probability (`log_softmax` over every id but 0)
    added to its score, and the `num_beams` best extensions of each row
    are kept (one top-k over `num_beams * vocabulary` candidates). A beam
    that has produced `end_id` is one candidate at its unchanged score.
    The loop stops when every beam has ended. The end id and everything
    after it are written as 0, with zero attention; a beam that descends
    from a placeholder scores `-inf`.

    Args:
        decoder: a built `kmodels.seq2seq.Decoder`.
        context: float `(batch, s, units)`, the encoder's output (one row
            per input; the beams are made here).
        context_mask: bool `(batch, s)`, True at real context tokens.
        start_id: int, the first id fed to the decoder.
        end_id: int, the id that ends a beam.
        max_length: int >= 1, the generated positions.
        num_beams: int >= 1.
        return_all_beams: bool. Return every beam, or the best one.
        constraints: a `kmodels.seq2seq.constraints.Constraints` or None:
            its transforms change the logits scored, the candidates it
            refuses are -inf (the scores of the others unchanged); the
            length penalty is applied by the caller.

    Returns:
        With `return_all_beams`, every beam sorted by score, best first
        (ties in the search's order): int32 `(batch, num_beams,
        max_length)`, float `(batch, num_beams, max_length, s)` and float32
        `(batch, num_beams)`, the sum of each beam's log-probabilities up
        to and including the end id; else the best beam, `(batch,
        max_length)`, `(batch, max_length, s)` and `(batch,)`. None where
        the backend compiles keras-hub's loop instead (TensorFlow, JAX).
    """
    loop = native_function("decoding", "beam_loop")
    if loop is None:
        return None
    return loop(
        decoder,
        context,
        context_mask,
        start_id,
        end_id,
        max_length,
        num_beams,
        return_all_beams,
        constraints,
    )


def sampling_loop(
    decoder,
    context,
    context_mask,
    start_id,
    end_id,
    max_length,
    rule,
    temperature,
    seed_state,
    constraints=None,
):
    """Random, top-k or top-p sampling of `decoder` over an encoded
    `context`, or None.

    The loop of `Translator.generate(..., sampler="random" | "top_k" |
    "top_p")`, which runs keras-hub's `RandomSampler`, `TopKSampler` or
    `TopPSampler` at temperature 1 on logits the step has divided by
    `temperature`: at each step the padding id 0 is excluded, the ids
    `constraints` refuse are removed, the logits less their maximum are
    divided by `temperature`, and one id is drawn per row from their
    softmax, cut to the `k` most likely ids (top-k) or to the most likely
    ids whose predecessors' probabilities sum to at most `p` (top-p, after
    an optional top-`k` cut), renormalised. A row stops at `end_id`; a row
    with no allowed id stops with padding and scores `-inf`. The draws are
    keras-hub's on torch, from the same stream: step `i` draws from a
    `torch.Generator` seeded with `first + counter + i` (mod 2**32), where
    `seed_state = (first, counter)` is the sampler's `SeedGenerator` state,
    so the ids equal those of keras-hub's loop with that state.

    Args:
        decoder: a built `kmodels.seq2seq.Decoder`.
        context: float `(batch, s, units)`, the encoder's output.
        context_mask: bool `(batch, s)`, True at real context tokens.
        start_id: int, the first id fed to the decoder.
        end_id: int, the id that ends a row.
        max_length: int >= 1, the generated positions.
        rule: `(kind, k, p)`: `("random", None, None)`, `("top_k", k,
            None)` or `("top_p", k or None, p)`, as the sampler's
            arguments.
        temperature: float32 scalar > 0.
        seed_state: int `(2,)`, the sampler's `SeedGenerator` state where
            the stream starts.
        constraints: a `kmodels.seq2seq.constraints.Constraints` or None.

    Returns:
        `((ids, attention, scores), seed_state)`: int32 `(batch,
        max_length)`, float `(batch, max_length, s)`, float32 `(batch,)`
        (the sum of the model's own log-probabilities, softmax over every
        id but 0 at temperature 1, of the generated ids up to and including
        the end id) and the stream's state after the loop (advanced by one
        per step keras-hub's loop would have run); or None where the
        backend compiles keras-hub's loop instead (TensorFlow, JAX).

    Example (torch; a `Translator` `model` and int32 `tokens`):

    ```python
    from kmodels.seq2seq.masking import padding_mask
    (ids, attention, scores), state = sampling_loop(
        model.decoder, model.encoder(tokens), padding_mask(tokens),
        model.start_id, model.end_id, 8, ("top_k", 5, None), 1.0,
        [7, 0],
    )
    ```
    """
    loop = native_function("decoding", "sampling_loop")
    if loop is None:
        return None
    return loop(
        decoder,
        context,
        context_mask,
        start_id,
        end_id,
        max_length,
        rule,
        temperature,
        seed_state,
        constraints,
    )
