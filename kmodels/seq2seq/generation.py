"""`Translator`'s generation methods: `generate` (the checked, compiled
and cached loops of `kmodels.seq2seq.decoding`), `generate_step` and
`search_step` (one traceable loop each, for exports)."""

from keras import ops

from kmodels.arguments import check_bool
from kmodels.contracts.checks import check_ids
from kmodels.contracts.checks import checked
from kmodels.contracts.hook import check_not_running_elsewhere
from kmodels.seq2seq import constraints
from kmodels.seq2seq import decoding
from kmodels.seq2seq import sampling


def check_token_range(
    tokens, vocabulary_size, name="context_tokens", owner="Translator"
):
    """Returns `tokens` as an int32 NumPy array `(batch, s)`, or raises
    the contract's error (`kmodels.contracts.check_ids`): a `TypeError` for
    a non-numeric dtype, a `ValueError` naming the allowed range and the
    values received otherwise (wrong rank, empty, fractional, out of
    range).

    Keras' `Embedding` returns NaN for an out-of-range id on JAX (and raises
    on the other backends), so ids are checked eagerly, before any compiled
    step."""
    return check_ids(tokens, name, owner, vocabulary_size).astype("int32")


class Generation:
    """The generation methods of `Translator` (a mixin: it reads the
    model's encoder, decoder, ids, vocabulary sizes and its `_generators`
    cache of compiled loops)."""

    def generate(
        self,
        context_tokens,
        max_length=50,
        sampler=None,
        return_scores=False,
        temperature=None,
        seed=None,
        **options,
    ):
        """Generates target ids for a batch of context ids.

        The loop is a `keras_hub.samplers` sampler's (one
        `keras.ops.while_loop`), over a step function whose cache is the
        decoder's GRU state; see `docs/decoding.md`. The padding id 0 is
        never produced. A sequence stops at `end_id`: the end id itself and
        everything after it are 0, as are the attention rows there. The
        loop stops early once every sequence (every beam) has ended. On
        TensorFlow and JAX the whole generation is one compiled function,
        traced once per input shape, `max_length` and sampler
        configuration (a name and its arguments, or an instance's class and
        `get_config()` without its temperature and seed: an equal instance
        reuses it); the model keeps the `decoding.MAX_LOOPS` (32) most
        recently used. On torch it runs eagerly. Calls from several threads
        are independent: a seeded call returns what it returns alone.

        | `sampler` | keras-hub class | sampler options |
        |---|---|---|
        | `"greedy"` | `GreedySampler` | none |
        | `"random"` | `RandomSampler` | none |
        | `"top_k"` | `TopKSampler` | `k=5` |
        | `"top_p"` | `TopPSampler` | `p=0.1`, `k=None` |
        | `"beam"` | `BeamSampler` | `num_beams=4`, `return_all_beams=False` |

        A `keras_hub.samplers.Sampler` instance (Greedy, Random, TopK, TopP
        or Beam) may be passed instead of a name, with its own temperature.
        It is checked as its name is (`k`, `p`, `num_beams`,
        `return_all_beams`), and its temperature must be finite and > 0.
        Without `seed`, it continues its own random stream (and advances
        it); the object itself is not used by the loop.

        Args:
            context_tokens: int `(batch, s)`, right-padded with 0; ids must
                lie in `[0, context_vocabulary_size)` (checked eagerly).
            max_length: int >= 1. Number of generated positions.
            sampler: a name from the table, a sampler instance, or `None`
                (the default): `"greedy"`, or `"random"` when `temperature`
                is > 0 (the behaviour of the temperature-only API).
            return_scores: bool. Also return each sequence's
                log-probability: the sum, over the generated ids up to and
                including `end_id`, of `log_softmax` of the raw logits with
                the padding id excluded (the temperature does not enter).
            temperature: finite float >= 0 or `None`. For `"random"`,
                `"top_k"` and `"top_p"`: the logits are divided by it
                before sampling (`None` means 1.0; 0 is refused; a tiny one
                samples the most likely ids, a huge one every id but the
                padding id alike). `"greedy"` and `"beam"` take only `None`
                or 0.
            seed: optional int in `[0, 2**31)`. With a seed, sampling is
                reproducible (on a given backend); without, each call draws
                afresh. Deterministic samplers ignore it.
            **options: the sampler's arguments (table above) and the
                decoding constraints (`docs/decoding.md`), each a
                `kmodels.seq2seq.constraints.Processor`:

                - `length_penalty`: finite float (default 0). A sequence's
                  returned score is its log-probability divided by
                  `length ** length_penalty`, `length` counting the
                  generated ids with the end id (or `max_length` for a
                  sequence cut there); beam search returns, and
                  `return_all_beams` orders, its beams by that score. > 0
                  favours longer outputs, < 0 shorter ones. A penalty with
                  `max_length ** |length_penalty| > 1e20` (|penalty| >
                  11.77 at `max_length=50`) is refused: float32 would turn
                  scores into -0.0 or -inf and their order into noise.
                - `min_length`: int in `[0, max_length]` (default 0). The
                  end id is the `min_length`-th generated id at the
                  earliest.
                - `no_repeat_ngram_size`: int >= 0 (default 0: off). No
                  n-gram of that many generated ids occurs twice.
                - `banned_ids`: optional flat sequence of ids in
                  `[0, target_vocabulary_size)` never generated (e.g. the
                  unknown-word id); not every id but 0.
                - `repetition_penalty`: finite float > 0 (default 1.0:
                  off). The logit of every id the sequence holds already is
                  divided by it if positive, multiplied by it otherwise
                  (CTRL, Hugging Face); the scores are the log-probabilities
                  of the penalised logits.
                - `prefix`: optional flat sequence of at most `max_length`
                  ids in `[1, target_vocabulary_size)`: the first
                  generated ids (CTranslate2's `target_prefix`); the score
                  sums the model's log-probabilities of them.

                `min_length`, `no_repeat_ngram_size`, `banned_ids` and
                `prefix` only remove candidates, for every sampler: scores
                stay the model's own log-probabilities, without
                renormalisation over the allowed ids. A sequence left with
                no allowed id stops there (padding follows) and scores
                `-inf`. The defaults give the unconstrained output exactly.

        Returns:
            `(ids, attention)`, and `scores` last with `return_scores=True`:
            int32 `(batch, max_length)`, float `(batch, max_length, s)` and
            float32 `(batch,)`. Beam search returns its best beam; with
            `return_all_beams=True` every beam, sorted by score (best
            first): `(batch, num_beams, max_length)`, `(batch, num_beams,
            max_length, s)` and `(batch, num_beams)`. Beams beyond the
            number of distinct sequences the search could form score
            `-inf`. With `num_return_sequences=n` (an int in `[1,
            num_beams]`, 1 but for beam search; Hugging Face's name, not
            with `return_all_beams`): the n best, with a sequence axis of
            n after the batch (also for `n=1`), as `return_all_beams`
            returns every beam.

        Raises:
            TypeError: an argument of the wrong type (`max_length` 2.7,
                `"3"`, `True` or `None`; `temperature="0.5"`; `k=2.0`),
                naming it, what was expected and what arrived (the error is
                also a `ValueError`).
            ValueError: ids out of range, `max_length < 1`, a negative or
                non-finite temperature, a non-finite or too large
                `length_penalty` (see above), nested `banned_ids`, a
                negative `min_length` or `no_repeat_ngram_size`,
                `min_length > max_length`, banned ids out of range or
                covering the whole vocabulary, a `repetition_penalty` <= 0
                or non-finite, prefix ids out of range or more than
                `max_length` of them, an unknown sampler name, an
                unknown or out-of-range sampler argument (of a name or an
                instance), or a temperature the sampler does not take.

        Example:
        >>> import numpy as np
        >>> from kmodels.seq2seq import Translator
        >>> model = Translator(20, 30, units=8, start_id=2, end_id=3)
        >>> context = np.array([[5, 6, 7, 0]])
        >>> ids, attention, scores = model.generate(
        ...     context, max_length=6, sampler="beam", num_beams=3,
        ...     return_all_beams=True, return_scores=True)
        >>> tuple(ids.shape), tuple(attention.shape), tuple(scores.shape)
        ((1, 3, 6), (1, 3, 6, 4), (1, 3))
        """
        owner = "Translator.generate"
        # `generate` reads the weights: not while `fit` holds them in
        # another thread (outside the model on JAX).
        check_not_running_elsewhere(
            self, f"`generate` of Translator '{self.name}'"
        )
        tokens = check_token_range(
            context_tokens, self.context_vocabulary_size, owner=owner
        )
        max_length = sampling.check_max_length(max_length, owner)
        return_scores = check_bool(
            return_scores, "return_scores", owner, type_error=True
        )
        count = options.pop("num_return_sequences", None)
        limits, sampler_kwargs = constraints.split(
            options, max_length, self.target_vocabulary_size, owner
        )
        if count is not None:
            # Hugging Face's name, beside keras-hub's `return_all_beams`.
            count = sampling.check_count(
                count,
                options,
                sampler,
                temperature,
                seed,
                sampler_kwargs,
                self.target_vocabulary_size,
                owner,
            )
        request = sampling.plan(
            sampler,
            temperature,
            seed,
            sampler_kwargs,
            self.target_vocabulary_size,
            owner,
        )
        if not self.built:
            self.build((tokens.shape, (tokens.shape[0], 1)))
        loop = self._generators.get(
            (max_length, request.key, limits.key),
            lambda: decoding.compile_loop(self, request, max_length, limits),
            decoding.MAX_LOOPS,
        )
        with checked():
            outputs = decoding.call_loop(loop, request, tokens, limits)
        # Outputs, not graph nodes: torch's eager loop records gradients.
        ids, attention, scores = (ops.stop_gradient(x) for x in outputs)
        if count is not None:
            if not request.return_all_beams:
                ids, attention, scores = (
                    ops.expand_dims(x, 1) for x in (ids, attention, scores)
                )
            ids, attention, scores = (
                x[:, :count] for x in (ids, attention, scores)
            )
        if return_scores:
            return ids, attention, scores
        return ids, attention

    def generate_step(
        self, context_tokens, max_length, uniforms=None, temperature=1.0
    ):
        """Generates target ids for one batch in a single traceable loop.

        The counterpart of keras-hub's `CausalLM.generate_step`: the inner
        generation loop alone, pure `keras.ops` (one `keras.ops.while_loop`)
        without `generate`'s checks, sampler choice and compiled-loop
        cache, for a caller that traces it into its own graph (the
        SavedModel of `TextTranslator.export` traces it in a
        `tf.function`). Greedy by default: the ids and attention of
        `generate(context_tokens, max_length)`. With `uniforms`, each
        position is sampled instead, by inverse CDF from
        `softmax(logits / temperature)`. The padding id 0 is never
        produced; a sequence stops at `end_id`: the end id itself and
        everything after it are 0, as are the attention rows there.

        Args:
            context_tokens: int `(batch, s)`, right-padded with 0; ids in
                `[0, context_vocabulary_size)` (not checked: the tensor may
                be symbolic).
            max_length: Python int >= 1. Number of generated positions.
            uniforms: optional float `(batch, max_length)` in `[0, 1)`:
                the draws of a sampled generation (one per position); `None`
                (the default) decodes greedily.
            temperature: float > 0 (or a scalar tensor), the logits'
                divisor when sampling; read only with `uniforms`.

        Returns:
            `(ids, attention)`: int32 `(batch, max_length)` and float
            `(batch, max_length, s)`.

        Example:
        >>> import numpy as np
        >>> from kmodels.seq2seq import Translator
        >>> model = Translator(20, 30, units=8, start_id=2, end_id=3)
        >>> ids, attention = model.generate_step(np.array([[5, 6, 7, 0]]), 6)
        >>> tuple(ids.shape), tuple(attention.shape)
        ((1, 6), (1, 6, 4))
        """
        if not self.built:
            shape = tuple(context_tokens.shape)
            self.build((shape, (shape[0], 1)))
        sample = uniforms is not None
        return decoding.step_loop(
            self, context_tokens, uniforms, temperature, max_length, sample
        )

    def search_step(
        self,
        context_tokens,
        max_length,
        sampler="greedy",
        num_beams=4,
        num_return_sequences=1,
        return_attention=False,
        **options,
    ):
        """The n best sequences of greedy decoding or beam search, in one
        traceable loop, with `generate`'s constraints.

        The loop of `generate(..., sampler=sampler, num_beams=num_beams,
        return_all_beams=True, return_scores=True, ...)` (keras-hub's
        sampler over the same step function, pure `keras.ops`), without
        the compiled-loop cache and the check of the ids (they may be
        symbolic): the SavedModel of `TextTranslator.export(...,
        sampler="beam")` traces it in a `tf.function`. The arguments are
        checked as `generate` checks them.

        Args:
            context_tokens: int `(batch, s)`, right-padded with 0.
            max_length: Python int >= 1. Number of generated positions.
            sampler: `"greedy"` or `"beam"`.
            num_beams: int >= 1, beam search's width (beam only).
            num_return_sequences: int in `[1, num_beams]` (1 for greedy),
                the best sequences returned per row.
            return_attention: bool, also return each sequence's
                cross-attention weights, float32 `(batch,
                num_return_sequences, max_length, s)`, last.
            **options: the decoding constraints of `generate`
                (`length_penalty`, `min_length`, `no_repeat_ngram_size`,
                `banned_ids`, `repetition_penalty`, `prefix`); another name
                raises a `TypeError`.

        Returns:
            `(ids, scores)`: int32 `(batch, num_return_sequences,
            max_length)` and float32 `(batch, num_return_sequences)`, best
            first, the scores those of `generate` (normalised by the
            length penalty).

        Example:
        >>> import numpy as np
        >>> from kmodels.seq2seq import Translator
        >>> model = Translator(20, 30, units=8, start_id=2, end_id=3)
        >>> ids, scores = model.search_step(
        ...     np.array([[5, 6, 7, 0]]), 6, sampler="beam", num_beams=3,
        ...     num_return_sequences=2, no_repeat_ngram_size=2)
        >>> tuple(ids.shape), tuple(scores.shape)
        ((1, 2, 6), (1, 2))
        """
        max_length = sampling.check_max_length(
            max_length, "Translator.search_step"
        )
        request, count, limits = decoding.check_search(
            self,
            max_length,
            sampler,
            num_beams,
            num_return_sequences,
            options,
            "Translator.search_step",
        )
        if not self.built:
            shape = tuple(context_tokens.shape)
            self.build((shape, (shape[0], 1)))
        return_attention = check_bool(
            return_attention,
            "return_attention",
            "Translator.search_step",
            type_error=True,
        )
        return decoding.search(
            self,
            context_tokens,
            max_length,
            request,
            count,
            limits,
            attention=return_attention,
        )
