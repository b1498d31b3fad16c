"""Random, top-k and top-p sampling in `Translator.generate` against a
NumPy oracle of the sampling distribution (`kmodels.testing.oracle`), on
every backend: TensorFlow and JAX run keras-hub's compiled sampler loops,
torch its native loop (`kmodels.backend.decoding.sampling_loop`), which
must also draw exactly the ids of keras-hub's loop from the same seed."""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from kmodels.backend.compiled import compile_inference_loop
from kmodels.backend.decoding import sampling_loop
from kmodels.seq2seq import Translator
from kmodels.seq2seq import decoding
from kmodels.seq2seq import sampling_loop as sampling_loop_module
from kmodels.seq2seq.masking import padding_mask
from kmodels.testing import oracle
from kmodels.testing.oracle import search

np_ = keras.ops.convert_to_numpy
# Target vocabulary 9: padding, 7 ids and the end id.
VOCAB_T, UNITS, LENGTH = 9, 6, 6
START, END = 2, 3
# Enough rows that each first-id frequency is within 5 standard deviations
# (<= 5 * sqrt(0.25 / ROWS) = 0.04) of its probability.
ROWS = 4000
FREQUENCY_TOL = 0.04
# float32 sums of <= 5 log-softmax terms against the float64 oracle.
SCORE_TOL = dict(rtol=1e-5, atol=1e-5)
# Each constraint on: two ids besides the end id, no end before the 6th id
# and no repeated pair, so that some rows die (no allowed id left: a row
# 2, 8, 2, 2 has used both pairs that start with 2) and others end.
CONSTRAINED = dict(
    banned_ids=[1, 4, 5, 6, 7], min_length=6, no_repeat_ngram_size=2
)


def _model():
    rng = np.random.default_rng(7)
    tokens = rng.integers(1, 20, (8, 6)).astype("int32")
    tokens[1, 3:] = 0
    tokens[2, 1:] = 0
    model = Translator(20, VOCAB_T, UNITS, start_id=START, end_id=END)
    model.build((tokens.shape, (8, 1)))
    model.set_weights(
        [rng.uniform(-1, 1, w.shape).astype("float32") for w in model.weights]
    )
    return model, tokens


@pytest.fixture(scope="module")
def model():
    return _model()


def _weights(model):
    weights = [w.astype("float64") for w in model.get_weights()]
    n = len(model.encoder.weights)
    return weights[:n], weights[n:]


def _oracle_first_distribution(model, tokens, temperature, k=None, p=None):
    """The oracle's distribution of the first generated id of each row:
    softmax of the logits / temperature over every id but padding, cut to
    the k most likely ids, then to the most likely ids whose predecessors
    sum to at most p, renormalised. float64 `(rows, vocabulary)`."""
    encoder_weights, decoder_weights = _weights(model)
    context = oracle.seq2seq_encoder(tokens, encoder_weights)
    logits, _, _ = oracle.seq2seq_decoder(
        context,
        np.asarray(tokens) != 0,
        np.full((len(tokens), 1), START),
        decoder_weights,
    )
    logits = logits[:, 0] / temperature
    logits[:, 0] = -np.inf
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.zeros_like(probs)
    for row, q in enumerate(probs):
        order = np.argsort(-q, kind="stable")
        kept = order[: (k or len(q))]
        if p is not None:
            before = np.cumsum(q[kept]) - q[kept]
            kept = kept[before <= p]
        out[row, kept] = q[kept] / q[kept].sum()
    return out


@pytest.mark.parametrize(
    "kwargs, cut",
    [
        (dict(sampler="top_k", k=3), dict(k=3)),
        (dict(sampler="top_p", p=0.5), dict(p=0.5)),
        (dict(sampler="random"), {}),
    ],
    ids=["top_k", "top_p", "random"],
)
def test_first_id_frequencies_match_the_oracle(model, kwargs, cut):
    model, tokens = model
    # Two context rows with different first-step distributions.
    context = np.repeat(tokens[:2], ROWS // 2, axis=0)

    def draw(seed):
        ids, _ = model.generate(
            context, 1, temperature=1.5, seed=seed, **kwargs
        )
        return np_(ids)

    ids = draw(11)
    # A seed reproduces its draws; another seed draws others.
    np.testing.assert_array_equal(draw(11), ids)
    assert np.any(draw(12) != ids)
    first = np.where(ids[:, 0] == 0, END, ids[:, 0])
    expected = _oracle_first_distribution(model, tokens[:2], 1.5, **cut)
    for row in range(2):
        drawn = first[row * ROWS // 2 : (row + 1) * ROWS // 2]
        frequency = np.bincount(drawn, minlength=VOCAB_T) / len(drawn)
        # Never outside the kept set; the kept ids in proportion.
        np.testing.assert_array_equal(frequency[expected[row] == 0], 0.0)
        np.testing.assert_allclose(frequency, expected[row], atol=FREQUENCY_TOL)
        # The cut leaves at least two ids here: it does sample.
        assert np.sum(expected[row] > 0.05) >= 2


def test_one_id_kept_is_greedy_decoding(model):
    """k=1, or a p below every probability, keeps the most likely allowed
    id: greedy decoding's ids and scores, at any temperature, under
    constraints."""
    options = dict(banned_ids=[4], min_length=3, no_repeat_ngram_size=2)
    model, tokens = model
    greedy = [
        np_(x)
        for x in model.generate(tokens, LENGTH, return_scores=True, **options)
    ]
    assert np.all(np.isfinite(greedy[2]))
    for kwargs in (dict(sampler="top_k", k=1), dict(sampler="top_p", p=1e-6)):
        got = [
            np_(x)
            for x in model.generate(
                tokens,
                LENGTH,
                temperature=3.0,
                seed=1,
                return_scores=True,
                **kwargs,
                **options,
            )
        ]
        np.testing.assert_array_equal(got[0], greedy[0])
        np.testing.assert_allclose(got[2], greedy[2], rtol=1e-6, atol=1e-6)


def _allowed(sequence, min_length, no_repeat_ngram_size, banned_ids):
    """The ids the constraints allow after `sequence`, from their wording
    (the padding id is never one)."""
    allowed = set(range(1, VOCAB_T)) - set(banned_ids)
    if len(sequence) + 1 < min_length:
        allowed.discard(END)
    n = no_repeat_ngram_size
    if n and len(sequence) >= n - 1:
        tail = tuple(sequence[len(sequence) - n + 1 :])
        for j in range(len(sequence) - n + 1):
            if tuple(sequence[j : j + n - 1]) == tail:
                allowed.discard(sequence[j + n - 1])
    return allowed


def test_constraints_obeyed_and_scores_are_the_models(model):
    """Every id drawn is allowed; a row stops with the end id (its score
    the teacher-forced log-probability, not renormalised) or with no
    allowed id left (padding, score -inf)."""
    model, tokens = model
    context = np.repeat(tokens, 16, axis=0)
    ids, _, scores = map(
        np_,
        model.generate(
            context,
            LENGTH,
            temperature=4.0,
            seed=5,
            return_scores=True,
            # Both cuts: the 4 most likely allowed ids, then top-p.
            sampler="top_p",
            p=0.9,
            k=4,
            **CONSTRAINED,
        ),
    )
    encoder_weights, decoder_weights = _weights(model)
    forced, _ = search.score_sequences(
        context, ids, encoder_weights, decoder_weights, START, END
    )
    dead = 0
    for row, score in zip(ids, scores):
        n = int(np.sum(row != 0))
        assert np.all(row[n:] == 0)
        for i in range(n):
            assert row[i] in _allowed(list(row[:i]), **_constraints())
        if n < LENGTH and not np.isfinite(score):
            # Stopped: nothing was allowed.
            assert not _allowed(list(row[:n]), **_constraints())
            dead += 1
        elif n < LENGTH:
            assert END in _allowed(list(row[:n]), **_constraints())
    assert 0 < dead < len(ids)
    live = np.isfinite(scores)
    np.testing.assert_allclose(scores[live], forced[live], **SCORE_TOL)
    # The draws vary.
    assert len({tuple(row) for row in ids}) >= 6


def _constraints():
    return dict(
        min_length=CONSTRAINED["min_length"],
        no_repeat_ngram_size=CONSTRAINED["no_repeat_ngram_size"],
        banned_ids=CONSTRAINED["banned_ids"],
    )


class _HubTopK(keras_hub.samplers.TopKSampler):
    """Subclasses: `generate` runs keras-hub's own loop for them."""


class _HubTopP(keras_hub.samplers.TopPSampler):
    pass


class _HubRandom(keras_hub.samplers.RandomSampler):
    pass


# (class, subclass, arguments): at temperature 1 (the native loop skips the
# scaling there) and another one.
_HUB = {
    "top_k": (keras_hub.samplers.TopKSampler, _HubTopK, dict(k=3)),
    "top_k_unit": (
        keras_hub.samplers.TopKSampler,
        _HubTopK,
        dict(k=3, temperature=1.0),
    ),
    "top_p": (keras_hub.samplers.TopPSampler, _HubTopP, dict(p=0.6)),
    "top_p_k": (
        keras_hub.samplers.TopPSampler,
        _HubTopP,
        dict(p=0.9, k=4, temperature=1.0),
    ),
    "random": (keras_hub.samplers.RandomSampler, _HubRandom, {}),
}


@pytest.mark.parametrize("name", list(_HUB))
def test_the_native_loop_draws_keras_hubs_ids(model, name):
    """On torch the native loop and keras-hub's eager loop give the same
    ids, attention and scores from a seed, and advance an unseeded
    instance's stream alike, with and without constraints (rows dying
    included). On TensorFlow and JAX both are keras-hub's compiled loop:
    there is no native loop to compare (`sampling_loop` is None)."""
    model, tokens = model
    if keras.backend.backend() != "torch":
        native = sampling_loop(
            model.decoder,
            model.encoder(tokens),
            padding_mask(ops.convert_to_tensor(tokens)),
            START,
            END,
            LENGTH,
            ("top_k", 3, None),
            1.0,
            [0, 0],
        )
        assert native is None
        return
    cls, subclass, kwargs = _HUB[name]
    kwargs = dict(dict(temperature=2.5), **kwargs)
    native_sampler = cls(seed=9, **kwargs)
    hub_sampler = subclass(seed=9, **kwargs)
    # The second call continues each stream, under the constraints.
    for options in ({}, CONSTRAINED):
        got, want = (
            [
                np_(x)
                for x in model.generate(
                    tokens, LENGTH, sampler=s, return_scores=True, **options
                )
            ]
            for s in (native_sampler, hub_sampler)
        )
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[2], want[2])
        np.testing.assert_array_equal(
            np_(native_sampler.seed_generator.state),
            np_(hub_sampler.seed_generator.state),
        )
    # Rows died (no allowed id left): the loop ran on to `LENGTH`.
    assert np.any(np.isneginf(got[2]))


def test_generate_dispatches_sampling_to_the_native_loop(monkeypatch, model):
    """Which loop `generate` asks for, on every backend: the native
    sampling loop with the sampler's rule (None on TensorFlow and JAX, then
    keras-hub's loop), or, for a subclass, keras-hub's loop directly. Both
    spies stop `generate` before any loop runs."""
    model, tokens = model

    def native_loop(*args):
        raise _Native(args[6])

    def fallback(*args):
        raise _Fallback()

    monkeypatch.setattr(decoding.native_decoding, "sampling_loop", native_loop)
    monkeypatch.setattr(decoding.native_decoding, "decoder_step", fallback)
    with pytest.raises(_Native) as caught:
        model.generate(tokens, 2, sampler="top_p", p=0.5, k=3, seed=1)
    assert caught.value.args[0] == ("top_p", 3, 0.5)
    with pytest.raises(_Native) as caught:
        model.generate(tokens, 2, sampler="random", temperature=0.5)
    assert caught.value.args[0] == ("random", None, None)
    with pytest.raises(_Fallback):
        model.generate(tokens, 2, sampler=_HubTopK(k=2, seed=1))


class _Native(Exception):
    pass


class _Fallback(Exception):
    pass


# A target vocabulary where a top-k of 3 runs in two stages on TensorFlow
# and JAX (`sampling_loop.chunk_size`: chunks of 6).
WIDE_VOCAB_T = 120


@pytest.fixture(scope="module")
def wide_model():
    rng = np.random.default_rng(8)
    tokens = rng.integers(1, 20, (8, 6)).astype("int32")
    tokens[1, 3:] = 0
    model = Translator(20, WIDE_VOCAB_T, UNITS, start_id=START, end_id=END)
    model.build((tokens.shape, (8, 1)))
    # Large logits: a few ids hold most of the probability, so that the
    # draws differ from one seed to another and rows end.
    model.set_weights(
        [rng.uniform(-2, 2, w.shape).astype("float32") for w in model.weights]
    )
    return model, tokens


def _oracle_top_k(x, k):
    """The k largest entries of each row, largest first, ties to the lower
    id (NumPy's stable sort)."""
    order = np.argsort(-x, axis=-1, kind="stable")[:, :k]
    return np.take_along_axis(x, order, axis=-1), order


@pytest.mark.parametrize("n, k", [(120, 3), (997, 5), (1000, 1)])
def test_top_k_in_two_stages_is_the_top_k(n, k):
    """`sampling_loop.top_k` (two stages here: `chunk_size` is not None;
    997 is prime, its rows padded) returns the k largest entries and
    their ids, largest first, as the NumPy oracle, compiled as in
    `generate`; with ties, exactly what `keras.ops.top_k(sorted=False)`
    returns compiled (keras-hub's call), ties to the lower id.

    torch: only the oracle on distinct values. There `generate` never runs
    it (its native loop samples), and torch's unsorted top-k has no fixed
    order to match."""
    assert sampling_loop_module.chunk_size(n, k) is not None
    rng = np.random.default_rng(n)
    distinct = rng.permutation(16 * n).reshape(16, n).astype("float32")
    # Ties within and across chunks, and between chunk maxima.
    tied = np.round(rng.normal(size=(16, n)), 1).astype("float32")
    tied[:4] = np.maximum(tied[:4], 0.5)

    def both(x):
        return sampling_loop_module.top_k(x, k), ops.top_k(x, k, sorted=False)

    run = compile_inference_loop(both, [])
    (values, ids), _ = run(ops.convert_to_tensor(distinct))
    want_values, want_ids = _oracle_top_k(distinct, k)
    np.testing.assert_array_equal(np_(values), want_values)
    np.testing.assert_array_equal(np_(ids), want_ids)
    if keras.backend.backend() == "torch":
        return
    (values, ids), (hub_values, hub_ids) = run(ops.convert_to_tensor(tied))
    np.testing.assert_array_equal(np_(ids), np_(hub_ids))
    np.testing.assert_array_equal(np_(values), np_(hub_values))
    np.testing.assert_array_equal(np_(ids), _oracle_top_k(tied, k)[1])


def test_the_top_k_sampler_draws_keras_hubs_ids(monkeypatch, wide_model):
    """A `TopKSampler` and keras-hub's own loop (a subclass) give the same
    ids, attention and scores from a seed and advance an unseeded
    instance's stream alike (constraints only change the logits the
    sampler sees: `test_the_native_loop_draws_keras_hubs_ids`): through the
    two-stage top-k on TensorFlow and JAX (it runs: a spy counts its
    traces), the native loop on torch."""
    model, tokens = wide_model
    traces = []
    two_stage = sampling_loop_module.top_k

    def spy(x, k):
        traces.append(k)
        return two_stage(x, k)

    monkeypatch.setattr(sampling_loop_module, "top_k", spy)
    kwargs = dict(k=3, temperature=2.5)
    sampler = keras_hub.samplers.TopKSampler(seed=9, **kwargs)
    hub_sampler = _HubTopK(seed=9, **kwargs)
    calls = []
    # The second call continues each stream.
    for _ in range(2):
        got, want = (
            [
                np_(x)
                for x in model.generate(
                    tokens, LENGTH, sampler=s, return_scores=True
                )
            ]
            for s in (sampler, hub_sampler)
        )
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(
            np_(sampler.seed_generator.state),
            np_(hub_sampler.seed_generator.state),
        )
        # Sampled: several distinct ids.
        assert len(np.unique(got[0])) >= 6
        calls.append(got[0])
    # The stream moved on: the second call drew other ids.
    assert np.any(calls[0] != calls[1])
    assert traces == ([] if keras.backend.backend() == "torch" else [3])


def test_unit_temperature_leaves_the_softmax_bit_for_bit():
    """`sampling_loop.scale` returns the logits as they are at temperature
    1: their softmax is the softmax of the logits less their maximum
    divided by 1 (the scaling's definition), bit for bit, compiled as in
    `generate`; at another temperature, the NumPy oracle's."""
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 4, (16, WIDE_VOCAB_T)).astype("float32")
    logits[:, 0] = -np.inf
    is_pad = np.arange(WIDE_VOCAB_T) == 0

    def softmaxes(logits, temperature):
        top = ops.max(logits, axis=-1, keepdims=True)
        defined = ops.where(is_pad, -np.inf, (logits - top) / temperature)
        scaled = sampling_loop_module.scale(logits, temperature, is_pad)
        return ops.softmax(scaled), ops.softmax(defined)

    run = compile_inference_loop(softmaxes, [])
    got, defined = run(
        ops.convert_to_tensor(logits), ops.convert_to_tensor(1.0)
    )
    np.testing.assert_array_equal(np_(got), np_(defined))
    got, _ = run(ops.convert_to_tensor(logits), ops.convert_to_tensor(2.0))
    z = logits.astype("float64") / 2.0
    want = np.exp(z - z.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(np_(got), want, rtol=1e-5, atol=1e-7)
