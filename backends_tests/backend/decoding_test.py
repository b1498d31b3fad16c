"""`kmodels.backend.decoding.greedy_loop` and `beam_loop` (torch's native
greedy and beam search loops) against NumPy decoders built from the oracle
(`kmodels.testing.oracle`), the same answer from `Translator.generate`
on every backend, and kmodels' own beam loops (torch's native one,
`kmodels.seq2seq.beam_search` on TensorFlow and JAX) against keras-hub's."""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from kmodels.backend.decoding import beam_loop
from kmodels.backend.decoding import decoder_step
from kmodels.backend.decoding import greedy_loop
from kmodels.seq2seq import Translator
from kmodels.seq2seq import decoding
from kmodels.seq2seq import sampling_loop
from kmodels.seq2seq.masking import padding_mask
from kmodels.testing import oracle
from kmodels.testing.oracle import search

np_ = keras.ops.convert_to_numpy
START, END = 2, 3


def _oracle_greedy(context_tokens, weights, units, max_length):
    """Greedy decoding with the oracle's decoder, one step at a time:
    `(ids, attention, scores)` with the `generate` contract."""
    encoder_weights, decoder_weights = weights[:7], weights[7:]
    tokens = np.asarray(context_tokens)
    context = oracle.seq2seq_encoder(tokens, encoder_weights)
    batch = tokens.shape[0]
    ids = np.zeros((batch, max_length), "int32")
    attention = np.zeros((batch, max_length, tokens.shape[1]))
    scores = np.zeros(batch)
    done = np.zeros(batch, bool)
    token = np.full((batch, 1), START)
    state = np.zeros((batch, units))
    for i in range(max_length):
        logits, state, weights_i = oracle.seq2seq_decoder(
            context, tokens != 0, token, decoder_weights, state=state
        )
        logits = logits[:, 0].astype("float64")
        logits[:, 0] = -np.inf  # the padding id is never generated
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        nxt = np.argmax(logits, -1)
        scores = np.where(
            done, scores, scores + log_probs[np.arange(batch), nxt]
        )
        done = done | (nxt == END)
        nxt = np.where(done, 0, nxt)
        ids[:, i] = nxt
        attention[:, i] = np.where(done[:, None], 0.0, weights_i[:, 0])
        token = nxt[:, None]
    return ids, attention, scores


def _model(seed, units=6, vocab_t=9):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 20, (4, 7)).astype("int32")
    tokens[1, 4:] = 0
    tokens[2, 1:] = 0
    model = Translator(20, vocab_t, units, start_id=START, end_id=END)
    model.build((tokens.shape, (4, 1)))
    # Large weights make rows and steps emit different tokens.
    model.set_weights(
        [rng.uniform(-2, 2, w.shape).astype("float32") for w in model.weights]
    )
    return model, tokens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_decoding_matches_the_oracle(seed):
    model, tokens = _model(seed)
    expected = _oracle_greedy(tokens, model.get_weights(), 6, 8)
    ids, attention = map(np_, model.generate(tokens, max_length=8))
    np.testing.assert_array_equal(ids, expected[0])
    np.testing.assert_allclose(attention, expected[1], atol=1e-5)
    native = greedy_loop(
        model.decoder,
        model.encoder(tokens),
        padding_mask(ops.convert_to_tensor(tokens)),
        START,
        END,
        8,
    )
    if keras.backend.backend() != "torch":
        # TensorFlow and JAX compile the Keras loop of `generate` instead.
        assert native is None
        return
    ids, attention, scores = map(np_, native)
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, expected[0])
    np.testing.assert_allclose(attention, expected[1], atol=1e-5)
    np.testing.assert_allclose(scores, expected[2], rtol=1e-5, atol=1e-5)


def test_the_loop_stops_when_every_row_has_ended():
    model, tokens = _model(0)
    weights = model.get_weights()
    # An output bias that makes END the argmax at the first step.
    weights[-1] = np.zeros_like(weights[-1])
    weights[-1][END] = 1e3
    model.set_weights(weights)
    ids, attention = map(np_, model.generate(tokens, max_length=5))
    np.testing.assert_array_equal(ids, np.zeros((4, 5), "int32"))
    np.testing.assert_array_equal(attention, np.zeros((4, 5, 7)))


def test_one_decoder_step_matches_the_oracle():
    model, tokens = _model(4)
    weights = model.get_weights()
    context = oracle.seq2seq_encoder(tokens, weights[:7])
    rng = np.random.default_rng(5)
    token = rng.integers(1, 9, (4,))
    state = rng.normal(size=(4, 6)).astype("float32")
    logits, new_state, attention = oracle.seq2seq_decoder(
        context, tokens != 0, token[:, None], weights[7:], state=state
    )
    step = decoder_step(
        model.decoder,
        model.encoder(tokens),
        padding_mask(ops.convert_to_tensor(tokens)),
    )
    if keras.backend.backend() != "torch":
        # TensorFlow and JAX compile the samplers' loop with the layers.
        assert step is None
        return
    got = [np_(v) for v in step(token, state)]
    np.testing.assert_allclose(got[0], logits[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], new_state, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], attention[:, 0], atol=1e-6)


def _beam_loop(model, tokens, max_length, num_beams, return_all_beams):
    return beam_loop(
        model.decoder,
        model.encoder(tokens),
        padding_mask(ops.convert_to_tensor(tokens)),
        START,
        END,
        max_length,
        num_beams,
        return_all_beams,
    )


def _oracle_beams(model, tokens, max_length, num_beams):
    weights = [w.astype("float64") for w in model.get_weights()]
    ids, scores = search.beam_search(
        tokens, weights[:7], weights[7:], START, END, max_length, num_beams
    )
    attention = [
        search.score_sequences(
            tokens, ids[:, k], weights[:7], weights[7:], START, END
        )[1]
        for k in range(ids.shape[1])
    ]
    return ids, np.stack(attention, 1), scores


# (seed, max_length, num_beams), vocabulary 9 (8 ids but padding), chosen
# with the oracle alone: beam search beats greedy on some row, and 5 of 16,
# 8 of 12 and 14 of 16 beams end before `max_length`.
@pytest.mark.parametrize(
    "seed, max_length, num_beams", [(1, 6, 4), (5, 8, 3), (6, 6, 4)]
)
def test_beam_search_matches_the_oracle(seed, max_length, num_beams):
    model, tokens = _model(seed)
    native = _beam_loop(model, tokens, max_length, num_beams, True)
    if keras.backend.backend() != "torch":
        # TensorFlow and JAX compile keras-hub's beam loop instead
        # (`backends_tests/seq2seq/generate_test.py` checks it).
        assert native is None
        return
    ids, attention, scores = map(np_, native)
    expected = _oracle_beams(model, tokens, max_length, num_beams)
    assert ids.dtype == np.int32 and scores.dtype == np.float32
    assert ids.shape == (4, num_beams, max_length)
    np.testing.assert_array_equal(ids, expected[0])
    # Attention: float32 softmax vs float64, measured < 1e-6.
    np.testing.assert_allclose(attention, expected[1], atol=1e-5)
    # float32 sums of <= 8 log-probabilities vs float64.
    np.testing.assert_allclose(scores, expected[2], rtol=1e-5, atol=1e-5)
    # Without `return_all_beams`: the best beam.
    best = [
        np_(x) for x in _beam_loop(model, tokens, max_length, num_beams, False)
    ]
    np.testing.assert_array_equal(best[0], expected[0][:, 0])
    np.testing.assert_allclose(best[1], expected[1][:, 0], atol=1e-5)
    np.testing.assert_allclose(best[2], scores[:, 0], rtol=0, atol=0)
    # On these models beam search beats greedy on some row (by > 0.6).
    greedy = _oracle_greedy(tokens, model.get_weights(), 6, max_length)
    assert np.any(scores[:, 0] > greedy[2] + 0.6)
    assert np.any(ids == 0)


class _KerasHubBeam(keras_hub.samplers.BeamSampler):
    """A subclass: `generate` runs keras-hub's own loop for it."""


@pytest.mark.parametrize(
    "max_length, num_beams, vocab_t, options",
    [
        # 12 beams, one step: 8 ids, so 4 beams descend from placeholders.
        (1, 12, 9, {}),
        # Enough ids for `beam_search.top_k`'s chunks (TensorFlow, JAX),
        # and every constraint.
        (
            6,
            4,
            1001,
            dict(no_repeat_ngram_size=1, banned_ids=[5], min_length=3),
        ),
    ],
    # Each case compiles two loops on TensorFlow and JAX (~5 s each on the
    # loaded 2-core machine): the unconstrained search at 4 beams is also
    # `generate_test.py`'s, against the NumPy beam search.
    ids=["placeholders", "chunks_constraints"],
)
def test_own_beam_search_equals_keras_hubs_loop(
    max_length, num_beams, vocab_t, options
):
    """kmodels' beam loop (torch's native one, `beam_search` in
    `keras.ops` on TensorFlow and JAX) against keras-hub's, both through
    `generate`."""
    model, tokens = _model(2, vocab_t=vocab_t)
    native = _beam_loop(model, tokens, max_length, num_beams, True)
    # TensorFlow and JAX have no native loop: `beam_search` runs.
    assert (native is None) == (keras.backend.backend() != "torch")
    own = [
        np_(x)
        for x in model.generate(
            tokens,
            max_length,
            sampler="beam",
            num_beams=num_beams,
            return_all_beams=True,
            return_scores=True,
            **options,
        )
    ]
    sampler = _KerasHubBeam(num_beams=num_beams, return_all_beams=True)
    hub = [
        np_(x)
        for x in model.generate(
            tokens, max_length, sampler=sampler, return_scores=True, **options
        )
    ]
    real = np.isfinite(hub[2])
    assert real.sum() == 4 * min(num_beams, 8)
    np.testing.assert_array_equal(np.isfinite(own[2]), real)
    # The ids of the placeholders' descendants are arbitrary (ties at
    # -inf); the real beams are the same, in the same order.
    np.testing.assert_array_equal(own[0][real], hub[0][real])
    np.testing.assert_allclose(own[1][real], hub[1][real], atol=1e-6)
    # log_softmax vs keras-hub's log(softmax): float32 rounding.
    np.testing.assert_allclose(own[2], hub[2], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n, k, chunk", [(1000, 4, 50), (203, 3, 10)])
def test_top_k_in_chunks_equals_a_full_sort(n, k, chunk):
    """`sampling_loop.top_k` (chunk maxima, then the best chunks), as beam
    search uses it, against
    NumPy's sort; rows with `-inf` ids and ids past the last full chunk."""
    rng = np.random.default_rng(n)
    x = rng.normal(size=(5, n)).astype("float32")
    x[0, :] = -np.inf
    x[0, [7, n - 1]] = [1.0, 2.0]
    x[1, n - 3 :] = 10.0 + np.arange(3)
    x[2, rng.random(n) < 0.9] = -np.inf
    values, index = map(np_, sampling_loop.top_k(x, k, chunk=chunk))
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    expected = np.take_along_axis(x, order, axis=1)
    np.testing.assert_array_equal(values, expected)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(index[finite], order[finite])
    np.testing.assert_array_equal(
        np.take_along_axis(x, index.astype("int64"), axis=1), values
    )


class _Native(Exception):
    pass


class _Fallback(Exception):
    pass


@pytest.mark.parametrize(
    "kwargs, native",
    [
        (dict(sampler="beam", num_beams=3), (3, False)),
        (dict(sampler="beam", num_beams=2, return_all_beams=True), (2, True)),
        (dict(sampler=keras_hub.samplers.BeamSampler(2)), (2, False)),
        # Not at another temperature (the search would differ from the
        # score), nor for a subclass (it may change the search).
        (
            dict(sampler=keras_hub.samplers.BeamSampler(2, temperature=2.0)),
            None,
        ),
        (dict(sampler=_KerasHubBeam(2)), None),
    ],
    ids=["name", "all_beams", "instance", "temperature", "subclass"],
)
def test_generate_dispatches_beam_search_to_the_native_loop(
    monkeypatch, kwargs, native
):
    """Which loop `generate` asks for, on every backend: the native beam
    loop (None on TensorFlow and JAX, then keras-hub's loop) or keras-hub's
    loop directly. Both spies stop `generate` before any loop runs."""
    model, tokens = _model(3)

    def native_loop(*args):
        # (num_beams, return_all_beams), before the constraints.
        raise _Native(args[-3:-1])

    def fallback(*args):
        raise _Fallback()

    monkeypatch.setattr(decoding.native_decoding, "beam_loop", native_loop)
    monkeypatch.setattr(decoding.native_decoding, "decoder_step", fallback)
    with pytest.raises(_Fallback if native is None else _Native) as caught:
        model.generate(tokens, 2, **kwargs)
    if native is not None:
        # (num_beams, return_all_beams)
        assert caught.value.args[0] == native
