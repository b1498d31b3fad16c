"""Decoding a `Translator` with keras-hub's samplers.

`keras_hub.samplers` run the generation loop (one `keras.ops.while_loop`,
compiled with the caller's function on TensorFlow and JAX); this module
turns a `Translator` into the `next(prompt, cache, index)` step function
they call, with the decoder's GRU state as the cache, and reads back what a
sampler does not return (the final cache: attention weights and scores;
`kmodels.backend.keras_internals.run_sampler_loop`). The arguments are
checked, and the sampler resolved, first: `kmodels.seq2seq.sampling`.

The prompt is `[start_id]` followed by `max_length` free positions; the
sampler writes one id per step. The step function encodes the
`Translator.generate` contract in the logits it returns: the padding id 0
is never generated (logit `-inf`, set after the logits are divided by the
temperature, so that no temperature makes it possible), and a row that has
produced `end_id` can only produce 0 afterwards (with probability 1, so a
beam's log-probability stops changing once it has ended). The temperature
is applied there too, to the logits less their maximum (the most likely
ids stay at 0 whatever the temperature: no overflow at a tiny one), and the
sampler itself runs at temperature 1.

Each call is independent of every other: the sampler's random stream (its
`SeedGenerator` state) goes into the loop as an input and comes out as an
output, threaded through the loop under a `keras.StatelessScope`, and the
sampler object a call runs is its own shallow copy. Concurrent seeded calls
give the serial result; the compiled loop (`compile_loop`) is shared, and
cached per model by the sampler's configuration
(`kmodels.seq2seq.sampling.Plan.key`), at most
`MAX_LOOPS` of them.

Beam search at temperature 1 (`"beam"` or a plain `BeamSampler`) runs
kmodels' own loop instead, the same search without keras-hub's per-step
reordering of the cache: `kmodels.seq2seq.beam_search` in `keras.ops`, or
natively on torch (`kmodels.backend.decoding`), where the samplers' loops
run eagerly. There, greedy decoding, random, top-k and top-p sampling (by
name, or a plain `GreedySampler`, `RandomSampler`, `TopKSampler` or
`TopPSampler`) run natively too: the same ids, the same draws from the
same random stream.
"""

import keras
import numpy as np
from keras import ops

from kmodels.arguments import check_int
from kmodels.backend import decoding as native_decoding
from kmodels.backend import keras_internals
from kmodels.backend.compiled import compile_inference_loop
from kmodels.seq2seq import beam_search
from kmodels.seq2seq import constraints
from kmodels.seq2seq import sampling
from kmodels.seq2seq import sampling_loop
from kmodels.seq2seq.beam_search import ranked
from kmodels.seq2seq.constraints import Constraints
from kmodels.seq2seq.masking import padding_mask

# Compiled generation loops kept per `Translator` (as the eager calls of
# `kmodels.seq2seq.eager_cache`); the least recently used is dropped first.
MAX_LOOPS = 32
# Logit of the ids a step may not produce: probability exactly 0, at every
# temperature.
NEG_INF = float("-inf")
# A beam whose search log-probability is below this descends from one of
# the placeholder beams keras-hub starts with (log-probability -1e9).
_PLACEHOLDER_LOG_PROB = -1e8
# The largest float32: a larger (finite) temperature is taken as this one.
_MAX_TEMPERATURE = float(np.finfo("float32").max)


def loop_count(model):
    """How many compiled generation loops `model` (a `Translator`) holds:
    one per sampler configuration and `max_length` used, at most
    `MAX_LOOPS` (the least recently used is dropped first)."""
    return len(model._generators)


def compile_loop(model, request, max_length, constraints):
    """The compiled generation loop of `model` (a `Translator`) for
    `request`'s sampler configuration, `max_length` and the structure of
    `constraints` (a `kmodels.seq2seq.constraints.Constraints`; its
    `values` are the loop's last input): `(sampler, run)`, where
    `run(tokens, temperature, states, values)` returns `((ids, attention,
    scores), states)` (`decode`), compiled once for the backend
    (`kmodels.backend.compiled.compile_inference_loop`) and safe to call
    from several threads at once."""
    sampler = request.build()

    def run(tokens, temperature, states, values):
        return decode(
            model,
            sampler,
            tokens,
            max_length,
            request.num_beams,
            request.return_all_beams,
            temperature if request.scaled else None,
            states,
            request.unit_temperature,
            constraints.with_values(values),
        )

    return sampler, compile_inference_loop(run, model.variables)


def call_loop(loop, request, tokens, constraints):
    """Runs a `compile_loop` result for one call of `request` under
    `constraints` (a `Constraints` of the same `key` as the loop's, whose
    `values` are inputs of the loop) and returns `(ids, attention,
    scores)`. The sampler's stream starts at `[seed, 0]`
    (as `keras.random.SeedGenerator(seed)`) or, without a seed, from the
    caller's instance, whose stream is then advanced."""
    sampler, run = loop
    variables = sampler.variables
    if request.seed is not None:
        states = [
            ops.convert_to_tensor([request.seed, 0], dtype=v.dtype)
            for v in variables
        ]
    elif request.stream is not None:
        states = [ops.copy(v) for v in request.stream.variables]
    else:
        states = [ops.copy(v) for v in variables]
    outputs, states = run(
        ops.convert_to_tensor(tokens, "int32"),
        ops.convert_to_tensor(
            min(request.temperature, _MAX_TEMPERATURE), "float32"
        ),
        states,
        tuple(ops.convert_to_tensor(v) for v in constraints.values),
    )
    if request.stream is not None:
        for variable, value in zip(request.stream.variables, states):
            variable.assign(value)
    return outputs


class _StatefulLoop:
    """The while loop of one call's sampler
    (`keras_internals.run_sampler_loop`): the sampler's random state rides
    in the loop variables (as keras-hub does on JAX), read from `states`
    and written to `self.states` instead of the sampler's variables, so
    that calls share nothing."""

    def __init__(self, sampler, states, reads):
        self.variables = sampler.variables
        self.states = list(states)
        # Model variables the step reads through Keras layers, with their
        # values (on JAX, the compiled function's inputs).
        self.reads = reads

    def __call__(self, cond, body, initial, maximum_iterations):
        if not self.variables:
            return ops.while_loop(
                cond, body, initial, maximum_iterations=maximum_iterations
            )
        variables = self.variables

        def stateful_cond(states, *values):
            return cond(*values)

        def stateful_body(states, *values):
            mapping = list(zip(variables, states)) + self.reads
            with keras.StatelessScope(
                state_mapping=mapping, initialize_variables=False
            ) as scope:
                values = body(*values)
            states = [scope.get_current_value(v) for v in variables]
            return (states, *values)

        states, *values = ops.while_loop(
            stateful_cond,
            stateful_body,
            (self.states, *initial),
            maximum_iterations=maximum_iterations,
        )
        self.states = list(states)
        return values


def decode(
    model,
    sampler,
    tokens,
    max_length,
    num_beams,
    return_all_beams,
    temperature,
    states,
    unit_temperature,
    constraints=None,
):
    """Runs `sampler` over `model` (a `Translator`) and returns `((ids,
    attention, scores), states)`; traceable (pure `keras.ops`).

    Shapes: `(batch, max_length)`, `(batch, max_length, s)` and
    `(batch,)`, or with all beams `(batch, num_beams, ...)`, sorted by
    score, best first. Scores are float32 log-probabilities under
    `softmax` of the raw logits with the padding id excluded, summed over
    the generated ids up to and including `end_id`.

    Args:
        model: a built `Translator`.
        sampler: a keras-hub sampler at temperature 1 (beam search with
            `return_all_beams=True`); not modified (each call runs a
            shallow copy of it).
        tokens: int32 `(batch, s)`.
        max_length: int, the generated positions.
        num_beams: int.
        return_all_beams: bool.
        temperature: float32 scalar > 0 (a tensor), what the logits are
            divided by, or `None` to leave them as they are (greedy
            decoding, beam search at temperature 1).
        states: the sampler's random states (one int tensor `(2,)` per
            `sampler.variables`), where its stream starts; the final ones
            are returned.
        unit_temperature: bool, `temperature` is 1 (beam search then uses
            its own log-probabilities as the scores).
        constraints: a `kmodels.seq2seq.constraints.Constraints`, or None:
            its transforms change the logits the scores are taken from,
            the candidates its masks refuse are never taken (the others
            keep their log-probabilities), and with a length penalty the
            returned scores are normalised and the beams ranked by them.
    """
    import keras_hub  # imported on use: not by `import kmodels`

    if constraints is None:
        constraints = Constraints()
    constrained = constraints.active
    beam = num_beams > 1 or isinstance(sampler, keras_hub.samplers.BeamSampler)
    # A length penalty re-ranks every beam: the loop returns them all.
    all_beams = return_all_beams or (constrained and beam)
    (ids, attention, score), states = _decode(
        model,
        sampler,
        tokens,
        max_length,
        num_beams,
        all_beams,
        temperature,
        states,
        unit_temperature,
        constraints,
    )
    if not constrained:
        return (ids, attention, score), states
    score = constraints.normalise(score, ids, max_length)
    if not beam:
        return (ids, attention, score), states
    return ranked(ids, attention, score, return_all_beams), states


def _decode(
    model,
    sampler,
    tokens,
    max_length,
    num_beams,
    return_all_beams,
    temperature,
    states,
    unit_temperature,
    constraints,
):
    """`decode` before the length penalty."""
    import keras_hub  # imported on use: not by `import kmodels`

    vocabulary = model.target_vocabulary_size
    end_id = model.end_id
    context = model.encoder(tokens)
    context_mask = padding_mask(tokens)
    batch, s = ops.shape(tokens)[0], ops.shape(tokens)[1]
    # Beam search at temperature 1 sums the same log-probabilities as the
    # score (`log(softmax)` of the step's logits): its own sum is the score.
    search_scores = (
        isinstance(sampler, keras_hub.samplers.BeamSampler) and unit_temperature
    )
    if search_scores and type(sampler) is keras_hub.samplers.BeamSampler:
        # keras-hub's loop reorders its whole cache and ranks every
        # (beam, id) at each step: kmodels' own loops do the same search
        # for less, torch's natively (it runs eagerly there), else
        # `kmodels.seq2seq.beam_search` in `keras.ops`.
        args = (max_length, num_beams, return_all_beams, constraints)
        native = native_decoding.beam_loop(
            model.decoder, context, context_mask, model.start_id, end_id, *args
        )
        if native is None:
            native = beam_search.beam_loop(model, context, context_mask, *args)
        return native, states
    if num_beams > 1:
        # The beams of a row stay in that row (keras-hub gathers them
        # within it), so the context is repeated once, outside the loop.
        context = ops.repeat(context, num_beams, axis=0)
        context_mask = ops.repeat(context_mask, num_beams, axis=0)
    if type(sampler) is keras_hub.samplers.GreedySampler and num_beams == 1:
        # torch runs this loop eagerly; its native greedy loop skips the
        # per-step framework overhead (None on TensorFlow and JAX, which
        # compile the sampler's loop).
        native = native_decoding.greedy_loop(
            model.decoder,
            context,
            context_mask,
            model.start_id,
            end_id,
            max_length,
            constraints,
        )
        if native is not None:
            return native, states
    rule = sampling_loop.sampling_rule(sampler)
    if rule is not None and num_beams == 1 and temperature is not None:
        # torch runs keras-hub's sampler loops eagerly; its native loop
        # draws the same ids from the same stream (None on TensorFlow and
        # JAX, which compile keras-hub's loop).
        native = native_decoding.sampling_loop(
            model.decoder,
            context,
            context_mask,
            model.start_id,
            end_id,
            max_length,
            rule,
            temperature,
            states[0],
            constraints,
        )
        if native is not None:
            outputs, state = native
            return outputs, [state]
    # torch: the decoder's step in torch operations (None elsewhere).
    native_step = native_decoding.decoder_step(
        model.decoder, context, context_mask
    )
    constrained = constraints.active
    is_pad = ops.arange(vocabulary, dtype="int32") == 0
    # A row that has ended may only produce the padding id.
    ended_logits = ops.cast(ops.where(is_pad, 0.0, NEG_INF), "float32")[None]

    def next_logits(prompt, cache, index):
        state, log_probs, score, attention = cache
        token = prompt[:, index - 1]
        if not search_scores:
            # The log-probability of the id chosen at the previous step
            # (with the search's own scores, the cache need not carry a
            # (batch * beams, vocabulary) tensor that keras-hub would
            # reorder at every step).
            chosen = ops.take_along_axis(log_probs, token[:, None], 1)
            score = score + chosen[:, 0]
        if native_step is not None:
            logits, state, weights = native_step(token, state)
            weights = weights[:, None, :]
        else:
            logits, state, weights = model.decoder(
                context,
                token[:, None],
                state=state,
                return_state=True,
                context_mask=context_mask,
                return_attention_weights=True,
            )
            logits = logits[:, 0]
        logits = ops.where(is_pad, NEG_INF, ops.cast(logits, "float32"))
        ended = ops.logical_or(token == end_id, token == 0)
        if constrained:
            # The transforms change the distribution the scores are
            # taken from; the masks below only remove candidates.
            generated = prompt[:, 1:]
            logits = constraints.transform(logits, generated, index - 1, end_id)
        if not search_scores:
            log_probs = ops.log_softmax(
                ops.where(ended[:, None], ended_logits, logits), axis=-1
            )
        if constrained:
            allowed = constraints.refuse(logits, generated, index - 1, end_id)
            if search_scores:
                # The search ranks by these log-probabilities as they are
                # (`run_sampler_loop(log_probabilities=True)`): masked ids
                # are removed, the others keep the model's values. A beam
                # with no allowed id has only -inf candidates and drops out.
                logits = ops.where(
                    allowed == NEG_INF, NEG_INF, ops.log_softmax(logits)
                )
            else:
                # A row with no allowed id stops: it writes padding, whose
                # log-probability (-inf) its score takes at the next step.
                dead = ops.all(allowed == NEG_INF, axis=-1)
                ended = ops.logical_or(ended, dead)
                logits = allowed
        if temperature is not None:
            logits = sampling_loop.scale(logits, temperature, is_pad)
        logits = ops.where(ended[:, None], ended_logits, logits)
        attention = ops.slice_update(
            attention, [0, index - 1, 0], ops.cast(weights, attention.dtype)
        )
        return logits, state, (state, log_probs, score, attention)

    prompt = ops.concatenate(
        [
            ops.full((batch, 1), model.start_id, dtype="int32"),
            ops.zeros((batch, max_length), dtype="int32"),
        ],
        axis=1,
    )
    cache = (
        ops.zeros((batch, model.units), dtype=model.compute_dtype),
        ops.zeros((batch, 1 if search_scores else vocabulary), "float32"),
        ops.zeros((batch,), dtype="float32"),
        ops.zeros((batch, max_length, s), dtype=model.compute_dtype),
    )
    # The model's variables the step reads through its layers, with their
    # current values: the random state's scope must map them too (on JAX
    # they are the compiled function's inputs). torch's native step has
    # read them already.
    reads = []
    if native_step is None:
        reads = [(v, ops.convert_to_tensor(v)) for v in model.variables]
    # An exact top-k sampler draws through a cheaper top-k: the same ids.
    sampler = sampling_loop.faster_sampler(sampler, vocabulary)
    # keras-hub's loop with the random state in the loop variables, on
    # this call's `states`, run by this call's own copy of the sampler.
    loop = _StatefulLoop(sampler, states, reads)
    final = keras_internals.run_sampler_loop(
        sampler,
        loop,
        next_logits,
        prompt,
        cache=cache,
        index=1,
        # Only the start id is given (the other positions hold 0).
        mask=ops.not_equal(prompt, 0),
        stop_token_ids=(end_id,),
        log_probabilities=constrained and search_scores,
    )
    states = loop.states
    prompt, cache, index, search_log_probs = (
        keras_internals.sampler_loop_results(final)
    )
    _, log_probs, score, attention = cache
    if not search_scores:
        last = prompt[:, index - 1]
        chosen = ops.take_along_axis(log_probs, last[:, None], 1)
        score = score + chosen[:, 0]
    ids = prompt[:, 1:]
    # The end id and everything after it become padding.
    ended = ops.cumsum(ops.cast(ids == end_id, "int32"), axis=1) > 0
    ids = ops.where(ended, 0, ids)
    attention = ops.where((ids != 0)[..., None], attention, 0.0)
    if num_beams == 1 and not isinstance(
        sampler, keras_hub.samplers.BeamSampler
    ):
        return (ids, attention, score), states
    if search_scores:
        score = ops.cast(search_log_probs, "float32")
    score = ops.where(
        search_log_probs > _PLACEHOLDER_LOG_PROB, score, float("-inf")
    )

    def beams(x):
        return ops.reshape(x, (-1, num_beams) + tuple(ops.shape(x)[1:]))

    ids, attention, score = beams(ids), beams(attention), beams(score)
    return ranked(ids, attention, score, return_all_beams), states


def check_search(
    translator, max_length, sampler, num_beams, count, options, owner
):
    """Checks the arguments of `Translator.search_step` (and of
    `TextTranslator.export`, which passes them on) and returns `(request,
    count, constraints)`: the sampler's `kmodels.seq2seq.sampling.Plan`
    (every beam), `count` as an int in `[1, beams]` and the checked
    `kmodels.seq2seq.constraints.Constraints` of `options` (the
    constraint options of `generate`; another name is a `TypeError`).
    `max_length` is checked already.
    """
    if sampler not in ("greedy", "beam"):
        raise ValueError(
            f"{owner}: `sampler` must be 'greedy' or 'beam'; got "
            f"{sampler!r} ({type(sampler).__name__})."
        )
    kwargs = {}
    if sampler == "beam":
        kwargs = dict(num_beams=num_beams, return_all_beams=True)
    request = sampling.plan(
        sampler, None, None, kwargs, translator.target_vocabulary_size, owner
    )
    count = check_int(
        count,
        "num_return_sequences",
        owner,
        1,
        request.num_beams,
        type_error=True,
    )
    limits = constraints.check(
        options, max_length, translator.target_vocabulary_size, owner
    )
    return request, count, limits


def search(
    model, tokens, max_length, request, count, constraints, attention=False
):
    """`Translator.search_step`'s loop, on arguments `check_search` has
    checked: `(ids (batch, count, max_length), scores (batch, count))`,
    and with `attention` the cross-attention weights of each sequence,
    `(batch, count, max_length, s)`, last."""
    (ids, weights, scores), _ = decode(
        model,
        request.build(),
        ops.convert_to_tensor(tokens, "int32"),
        max_length,
        request.num_beams,
        request.return_all_beams,
        None,
        [],
        request.unit_temperature,
        constraints,
    )
    if not request.return_all_beams:
        # Greedy decoding: one sequence.
        out = ids[:, None], scores[:, None], weights[:, None]
    else:
        out = ids[:, :count], scores[:, :count], weights[:, :count]
    return out if attention else out[:2]


def step_loop(model, tokens, uniforms, temperature, max_length, sample):
    """`Translator.generate_step`'s loop over `model`: greedy, or
    inverse-CDF sampling from `uniforms` (read only when `sample`);
    `generate` itself uses keras-hub's samplers. Returns `(ids,
    attention)`."""
    context = model.encoder(tokens)
    context_mask = padding_mask(tokens)
    batch, s = ops.shape(tokens)[0], ops.shape(tokens)[1]
    positions = ops.arange(max_length, dtype="int32")
    vocab_ids = ops.arange(model.target_vocabulary_size, dtype="int32")

    def cond(i, token, state, done, ids, attention):
        return ops.logical_and(
            ops.less(i, max_length),
            ops.logical_not(ops.all(done)),
        )

    def body(i, token, state, done, ids, attention):
        logits, state, weights = model.decoder(
            context,
            token,
            state=state,
            return_state=True,
            context_mask=context_mask,
            return_attention_weights=True,
        )
        # The padding id is never generated.
        logits = ops.where(vocab_ids == 0, -1e9, logits[:, 0, :])
        if sample:
            probs = ops.softmax(logits / temperature, axis=-1)
            cdf = ops.cumsum(probs, axis=-1)
            u = ops.take(uniforms, i, axis=1)[:, None]
            # Inverse-CDF sampling: the first id whose cumulative
            # probability exceeds u.
            nxt = ops.sum(ops.cast(ops.less(cdf, u), "int32"), axis=-1)
            nxt = ops.minimum(nxt, model.target_vocabulary_size - 1)
        else:
            nxt = ops.cast(ops.argmax(logits, axis=-1), "int32")
        done = ops.logical_or(done, ops.equal(nxt, model.end_id))
        nxt = ops.where(done, 0, nxt)
        here = ops.equal(positions, i)[None, :]
        ids = ops.where(here, nxt[:, None], ids)
        keep = ops.logical_and(here[:, :, None], ~done[:, None, None])
        attention = ops.where(keep, weights, attention)
        return i + 1, nxt[:, None], state, done, ids, attention

    initial = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch, 1), model.start_id, dtype="int32"),
        ops.zeros((batch, model.units), dtype=model.compute_dtype),
        ops.zeros((batch,), dtype="bool"),
        ops.zeros((batch, max_length), dtype="int32"),
        ops.zeros((batch, max_length, s), dtype=model.compute_dtype),
    )
    out = ops.while_loop(cond, body, initial)
    return out[4], out[5]
