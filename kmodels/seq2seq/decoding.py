"""Decoding a `Translator` with keras-hub's samplers.

`keras_hub.samplers` run the generation loop (one `keras.ops.while_loop`,
compiled with the caller's function on TensorFlow and JAX); this module
turns a `Translator` into the `next(prompt, cache, index)` step function
they call, with the decoder's GRU state as the cache, and reads back what a
sampler does not return (the final cache: attention weights and scores).

The prompt is `[start_id]` followed by `max_length` free positions; the
sampler writes one id per step. The step function encodes the
`Translator.generate` contract in the logits it returns: the padding id 0
is never generated (logit -1e9), and a row that has produced `end_id` can
only produce 0 afterwards (with probability 1, so a beam's log-probability
stops changing once it has ended).

On torch, where the samplers' loops run eagerly, greedy decoding and beam
search at temperature 1 (`"greedy"`, `"beam"` or a plain `GreedySampler`
or `BeamSampler` instance) run natively instead
(`kmodels.backend.decoding`): the same search, in torch operations on the
layers' variables.
"""

import random

import keras_hub
from keras import ops

from kmodels.arguments import check_bool
from kmodels.arguments import check_float
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.backend import decoding as native_decoding
from kmodels.seq2seq.masking import padding_mask

# Logit of the ids a step may not produce: `softmax` gives them exactly 0.
NEG_INF = -1e9
# A beam whose search log-probability is below this descends from one of
# the placeholder beams keras-hub starts with (log-probability -1e9).
_PLACEHOLDER_LOG_PROB = -1e8

# Sampler name: (keras-hub class, its keyword arguments, samples randomly).
SAMPLERS = {
    "greedy": (keras_hub.samplers.GreedySampler, (), False),
    "random": (keras_hub.samplers.RandomSampler, (), True),
    "top_k": (keras_hub.samplers.TopKSampler, ("k",), True),
    "top_p": (keras_hub.samplers.TopPSampler, ("p", "k"), True),
    "beam": (
        keras_hub.samplers.BeamSampler,
        ("num_beams", "return_all_beams"),
        False,
    ),
}
_DEFAULTS = {
    "top_k": {"k": 5},
    "top_p": {"p": 0.1, "k": None},
    "beam": {"num_beams": 4, "return_all_beams": False},
}


class Plan:
    """A checked decoding request: which sampler to build (or the caller's
    instance), how many beams, and the key of its compiled loop.

    Attributes:
        key: hashable; equal keys share a compiled loop (a caller's
            instance is keyed by its identity).
        num_beams: int, 1 unless beam search.
        return_all_beams: bool.
        temperature: float for a named sampling sampler (given to the
            compiled loop as a tensor: no retrace per temperature), else
            `None` (the sampler's own).
        seed: the seed to start from, or `None` to keep the instance's own
            state.
    """

    def __init__(
        self, key, build, num_beams, return_all_beams, temperature, seed
    ):
        self.key = key
        self.build = build
        self.num_beams = num_beams
        self.return_all_beams = return_all_beams
        self.temperature = temperature
        self.seed = seed


def plan(sampler, temperature, seed, sampler_kwargs, vocabulary_size, owner):
    """Checks the sampler arguments of `Translator.generate` and returns a
    `Plan`; raises a `ValueError` naming the argument otherwise.

    `sampler=None` keeps the behaviour of the temperature-only API: greedy
    at `temperature` 0 (or `None`), random sampling at a temperature > 0.
    """
    if seed is not None:
        seed = check_int(seed, "seed", owner, 0, 2**31 - 1)
    if temperature is not None:
        temperature = float(temperature)
        if not temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0; got {temperature}")
    if sampler is None:
        sampler = "random" if temperature else "greedy"
    if isinstance(sampler, keras_hub.samplers.Sampler):
        return _instance_plan(sampler, temperature, seed, sampler_kwargs, owner)
    if not isinstance(sampler, str) or sampler not in SAMPLERS:
        raise ValueError(
            f"{owner}: `sampler` must be one of {tuple(SAMPLERS)} or a "
            "keras_hub.samplers.Sampler; got "
            f"{sampler!r} ({type(sampler).__name__})."
        )
    cls, names, random_ = SAMPLERS[sampler]
    unknown = sorted(set(sampler_kwargs) - set(names))
    if unknown:
        allowed = ", ".join(names) if names else "none"
        raise ValueError(
            f"{owner}: sampler={sampler!r} takes no argument "
            f"{', '.join(map(repr, unknown))}; its arguments: {allowed}. "
            "(`temperature` and `seed` are arguments of generate itself.)"
        )
    kwargs = dict(_DEFAULTS.get(sampler, {}), **sampler_kwargs)
    kwargs = _check_kwargs(sampler, kwargs, vocabulary_size, owner)
    if random_:
        if temperature is None:
            temperature = 1.0
        if temperature == 0.0:
            raise ValueError(
                f"{owner}: sampler={sampler!r} needs a temperature > 0 "
                "(1.0 leaves the logits unscaled); got 0.0. For argmax "
                "decoding use sampler='greedy'."
            )
        build_kwargs = dict(kwargs)
    else:
        if temperature:
            raise ValueError(
                f"{owner}: sampler={sampler!r} is deterministic and takes no "
                f"temperature; got {temperature}. Sampling at a "
                "temperature: sampler='random', 'top_k' or 'top_p'."
            )
        build_kwargs = dict(kwargs)
        seed = temperature = None
    num_beams = kwargs.get("num_beams", 1)
    return_all = kwargs.get("return_all_beams", False)
    if sampler == "beam":
        # All beams and their log-probabilities are read from the loop.
        build_kwargs["return_all_beams"] = True
    key = (sampler,) + tuple(sorted(kwargs.items()))
    if random_ and seed is None:
        # Each call draws afresh (from Python's `random`, which
        # `keras.utils.set_random_seed` seeds).
        seed = random.randint(0, 2**31 - 1)
    return Plan(
        key,
        lambda: cls(**build_kwargs),
        num_beams,
        return_all,
        temperature,
        seed,
    )


def _check_kwargs(name, kwargs, vocabulary_size, owner):
    where = f"{owner} (sampler={name!r})"
    # The padding id is never a candidate: vocabulary_size - 1 ids remain.
    ids = vocabulary_size - 1
    if name == "top_k":
        kwargs["k"] = check_int(kwargs["k"], "k", where, 1, ids)
    elif name == "top_p":
        kwargs["p"] = check_float(
            kwargs["p"], "p", where, 0.0, 1.0, exclusive_minimum=True
        )
        kwargs["k"] = check_optional_int(kwargs["k"], "k", where, 1, ids)
    elif name == "beam":
        kwargs["num_beams"] = check_int(kwargs["num_beams"], "num_beams", where)
        kwargs["return_all_beams"] = check_bool(
            kwargs["return_all_beams"], "return_all_beams", where
        )
    return kwargs


def _instance_plan(sampler, temperature, seed, sampler_kwargs, owner):
    if sampler_kwargs:
        raise ValueError(
            f"{owner}: sampler arguments {sorted(sampler_kwargs)} go to the "
            f"sampler's constructor when `sampler` is an instance "
            f"({type(sampler).__name__})."
        )
    if temperature:
        raise ValueError(
            f"{owner}: set the temperature on the sampler instance "
            f"({type(sampler).__name__}(temperature=...)); got "
            f"temperature={temperature} as well."
        )
    unsupported = (
        keras_hub.samplers.ContrastiveSampler,
        keras_hub.samplers.SpeculativeSampler,
    )
    if isinstance(sampler, unsupported):
        raise ValueError(
            f"{owner}: {type(sampler).__name__} needs the hidden states of "
            "a causal language model and is not supported; use a name or "
            "a Greedy, Random, TopK, TopP or Beam sampler."
        )
    beam = isinstance(sampler, keras_hub.samplers.BeamSampler)
    num_beams = check_int(sampler.num_beams, "num_beams", owner) if beam else 1
    return_all = bool(sampler.return_all_beams) if beam else False

    def build():
        if beam and not sampler.return_all_beams:
            # All beams and their log-probabilities are read from the
            # loop; the instance itself is left as it was.
            return type(sampler).from_config(
                dict(sampler.get_config(), return_all_beams=True)
            )
        return sampler

    return Plan(
        ("instance", id(sampler), sampler),
        build,
        num_beams,
        return_all,
        None,
        seed if sampler.variables else None,
    )


def reset_seed(sampler, seed):
    """Starts `sampler`'s random streams from `seed` (as
    `keras.random.SeedGenerator(seed)` would)."""
    for state in sampler.variables:
        state.assign(ops.convert_to_tensor([seed, 0], dtype=state.dtype))


class _LoopCapture:
    """Keeps the final loop variables of a sampler's `run_loop`.

    Samplers return only the ids; the attention weights and the scores
    live in the cache, which is among the loop variables. The capture
    wraps the instance's `run_loop` for the duration of one call (a trace
    on TensorFlow and JAX) and restores it."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.loop_vars = None

    def __enter__(self):
        sampler = self.sampler
        self.saved = sampler.__dict__.get("run_loop")
        original = sampler.run_loop

        def run_loop(*args, **kwargs):
            self.loop_vars = original(*args, **kwargs)
            return self.loop_vars

        sampler.run_loop = run_loop
        return self

    def __exit__(self, *args):
        if self.saved is None:
            del self.sampler.run_loop
        else:
            self.sampler.run_loop = self.saved


def decode(model, sampler, tokens, max_length, num_beams, return_all_beams):
    """Runs `sampler` over `model` (a `Translator`) and returns `(ids,
    attention, scores)`; traceable (pure `keras.ops`).

    Shapes: `(batch, max_length)`, `(batch, max_length, s)` and
    `(batch,)`, or with all beams `(batch, num_beams, ...)`, sorted by
    score, best first. Scores are float32 log-probabilities under
    `softmax` of the raw logits with the padding id excluded, summed over
    the generated ids up to and including `end_id`.
    """
    vocabulary = model.target_vocabulary_size
    end_id = model.end_id
    context = model.encoder(tokens)
    context_mask = padding_mask(tokens)
    batch, s = ops.shape(tokens)[0], ops.shape(tokens)[1]
    # Beam search at temperature 1 sums the same log-probabilities as the
    # score (`log(softmax)` of the step's logits): its own sum is the score.
    search_scores = (
        isinstance(sampler, keras_hub.samplers.BeamSampler)
        and isinstance(sampler.temperature, (int, float))
        and sampler.temperature == 1.0
    )
    if search_scores and type(sampler) is keras_hub.samplers.BeamSampler:
        # torch runs keras-hub's beam loop eagerly, where its bookkeeping
        # and masks over (batch * beams, vocabulary) logits cost more than
        # the decoder's step; its native beam loop does the same search
        # (None on TensorFlow and JAX, which compile keras-hub's loop).
        native = native_decoding.beam_loop(
            model.decoder,
            context,
            context_mask,
            model.start_id,
            end_id,
            max_length,
            num_beams,
            return_all_beams,
        )
        if native is not None:
            return native
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
        )
        if native is not None:
            return native
    # torch: the decoder's step in torch operations (None elsewhere).
    native_step = native_decoding.decoder_step(
        model.decoder, context, context_mask
    )
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
        logits = ops.where(ended[:, None], ended_logits, logits)
        if not search_scores:
            log_probs = ops.log_softmax(logits, axis=-1)
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
    with _LoopCapture(sampler) as capture:
        sampler(
            next_logits,
            prompt,
            cache=cache,
            index=1,
            # Only the start id is given (the other positions hold 0).
            mask=ops.not_equal(prompt, 0),
            stop_token_ids=(end_id,),
            model=model,
        )
    prompt, cache, index = capture.loop_vars[:3]
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
        return ids, attention, score
    search_log_probs = capture.loop_vars[4]
    if search_scores:
        score = ops.cast(search_log_probs, "float32")
    score = ops.where(
        search_log_probs > _PLACEHOLDER_LOG_PROB, score, float("-inf")
    )

    def beams(x):
        return ops.reshape(x, (-1, num_beams) + tuple(ops.shape(x)[1:]))

    ids, attention, score = beams(ids), beams(attention), beams(score)
    order = ops.argsort(-score, axis=1)
    score = ops.take_along_axis(score, order, axis=1)
    ids = ops.take_along_axis(ids, order[:, :, None], axis=1)
    attention = ops.take_along_axis(attention, order[:, :, None, None], axis=1)
    if return_all_beams:
        return ids, attention, score
    return ids[:, 0], attention[:, 0], score[:, 0]
