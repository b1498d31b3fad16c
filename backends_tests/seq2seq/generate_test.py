"""`Translator.generate` with keras-hub samplers: greedy, beam search,
top-k, top-p and random sampling, and sequence scores, against the NumPy
search oracle (`kmodels.testing.oracle.search`)."""

import re

import keras
import keras_hub
import numpy as np
import pytest

from kmodels.seq2seq import Translator
from kmodels.testing.oracle import search

np_ = keras.ops.convert_to_numpy

# Target vocabulary 5: padding, START, END and two more ids, so that the
# oracle can enumerate every sequence of length <= 3 (4 ** 3 at most).
VOCAB_C, VOCAB_T, UNITS = 7, 5, 4
START, END = 1, 2
CONTEXT = np.array(
    [[3, 4, 5, 6, 1], [6, 1, 2, 0, 0], [2, 0, 0, 0, 0], [5, 5, 3, 2, 0]],
    "int32",
)
# Scores: float32 log-softmax sums of <= 6 terms against float64; measured
# differences < 2e-6.
SCORE_TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def model():
    """One translator for the module, so that each compiled loop is traced
    once per backend. Weights uniform in [-1.5, 1.5] from seed 24: chosen
    (by the oracle alone) so that greedy rows differ, one row ends at once,
    and beam search (3 beams) beats greedy on three rows."""
    model = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END)
    model.build((CONTEXT.shape, (4, 1)))
    rng = np.random.default_rng(24)
    model.set_weights(
        [
            rng.uniform(-1.5, 1.5, tuple(w.shape)).astype("float32")
            for w in model.weights
        ]
    )
    return model


def _oracle_weights(model):
    """The model's float32 weights as float64: (encoder, decoder) lists."""
    weights = [w.astype("float64") for w in model.get_weights()]
    n = len(model.encoder.weights)
    return weights[:n], weights[n:]


def _oracle(function, model, *args):
    encoder_weights, decoder_weights = _oracle_weights(model)
    return function(
        CONTEXT, encoder_weights, decoder_weights, START, END, *args
    )


def _generate(model, max_length=5, **kwargs):
    return tuple(
        map(
            np_,
            model.generate(CONTEXT, max_length, return_scores=True, **kwargs),
        )
    )


def _check_contract(ids):
    """Padding is never generated: a row is non-zero ids, then zeros."""
    assert ids.dtype == np.int32
    assert ids.min() >= 0 and ids.max() < VOCAB_T
    flat = ids.reshape(-1, ids.shape[-1])
    for row in flat:
        n = int(np.sum(row != 0))
        assert np.all(row[:n] != 0) and np.all(row[n:] == 0)


def test_greedy_equals_teacher_forced_argmax_and_oracle_scores(model, parity):
    ids, attention, scores = _generate(model)
    assert ids.shape == (4, 5) and attention.shape == (4, 5, 5)
    assert scores.shape == (4,) and scores.dtype == np.float32
    _check_contract(ids)
    # Teacher forcing: feed [START] + ids, take the argmax over non-padding
    # ids; where a row stopped, that argmax is END.
    target_in = np.concatenate([np.full((4, 1), START), ids[:, :-1]], 1)
    replay = 1 + np.argmax(np_(model((CONTEXT, target_in)))[..., 1:], -1)
    for row in range(4):
        n = int(np.sum(ids[row] != 0))
        np.testing.assert_array_equal(ids[row, :n], replay[row, :n])
        if n < 5:
            assert replay[row, n] == END
    # Greedy is beam search with one beam, in the oracle.
    expected_ids, expected_scores = _oracle(search.beam_search, model, 5, 1)
    np.testing.assert_array_equal(ids, expected_ids[:, 0])
    np.testing.assert_allclose(scores, expected_scores[:, 0], **SCORE_TOL)
    oracle_scores, oracle_attention = _oracle_scores(model, ids)
    np.testing.assert_allclose(scores, oracle_scores, **SCORE_TOL)
    # Attention: float32 softmax vs float64, measured < 1e-6.
    np.testing.assert_allclose(attention, oracle_attention, atol=1e-5)
    parity.record("seq2seq/generate_greedy_ids", ids, 0, 0)
    parity.record("seq2seq/generate_greedy_scores", scores, 1e-5, 1e-5)


def _oracle_scores(model, ids):
    encoder_weights, decoder_weights = _oracle_weights(model)
    return search.score_sequences(
        CONTEXT, ids, encoder_weights, decoder_weights, START, END
    )


def test_one_beam_and_top_k_of_one_equal_greedy(model):
    ids, attention, scores = _generate(model)
    # By name and as keras-hub instances (each compiles its own loop).
    for kwargs in (
        dict(sampler="beam", num_beams=1),
        dict(sampler=keras_hub.samplers.TopKSampler(k=1, seed=5)),
    ):
        got = _generate(model, **kwargs)
        np.testing.assert_array_equal(got[0], ids, err_msg=str(kwargs))
        np.testing.assert_allclose(got[1], attention, atol=1e-6)
        np.testing.assert_allclose(got[2], scores, rtol=1e-6, atol=1e-6)


def test_beam_search_matches_the_oracle_and_beats_greedy(model, parity):
    _, _, greedy_scores = _generate(model)
    ids, attention, scores = _generate(
        model, sampler="beam", num_beams=3, return_all_beams=True
    )
    assert ids.shape == (4, 3, 5) and attention.shape == (4, 3, 5, 5)
    assert scores.shape == (4, 3)
    _check_contract(ids)
    expected_ids, expected_scores = _oracle(search.beam_search, model, 5, 3)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, **SCORE_TOL)
    # Every beam's score and attention are its ids' teacher-forced ones.
    for beam in range(3):
        oracle_scores, oracle_attention = _oracle_scores(model, ids[:, beam])
        np.testing.assert_allclose(scores[:, beam], oracle_scores, **SCORE_TOL)
        np.testing.assert_allclose(
            attention[:, beam], oracle_attention, atol=1e-5
        )
    # On this model beam search beats greedy on rows 0, 1 and 3 (oracle:
    # -2.449 vs -3.364, -1.411 vs -3.520, -2.916 vs -3.415) and ties on
    # row 2 (END first).
    assert np.all(scores[:, 0] >= greedy_scores - 1e-6)
    assert np.sum(scores[:, 0] > greedy_scores + 0.4) == 3
    parity.record("seq2seq/generate_beam_ids", ids, 0, 0)
    parity.record("seq2seq/generate_beam_scores", scores, 1e-5, 1e-5)


def test_wide_beam_equals_exhaustive_search(model):
    """Length <= 3, vocabulary 5: after two steps at most 1 + 3 * 4 = 13
    hypotheses exist (the one ended by END, and 3 live ones with 4
    extensions each), so 16 beams keep them all and the third step scores
    every sequence: the best beam is the exhaustive optimum."""
    # A keras-hub instance without `return_all_beams`: the best beam.
    ids, attention, scores = _generate(
        model, 3, sampler=keras_hub.samplers.BeamSampler(num_beams=16)
    )
    assert ids.shape == (4, 3) and attention.shape == (4, 3, 5)
    expected_ids, expected_scores = _oracle(search.exhaustive_search, model, 3)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, **SCORE_TOL)
    np.testing.assert_allclose(
        attention, _oracle_scores(model, ids)[1], atol=1e-5
    )
    # Greedy's scores at length 3 (greedy itself is pinned to the oracle's
    # greedy decoding above).
    greedy_scores = _oracle(search.beam_search, model, 3, 1)[1][:, 0]
    assert np.all(scores >= greedy_scores - 1e-6)
    # This model has a row where greedy is not optimal.
    assert np.any(scores > greedy_scores + 0.1)


def test_beams_beyond_the_distinct_sequences_score_minus_infinity(model):
    # One step: 4 possible ids (1, END, 3, 4), so 4 real beams of 6.
    ids, _, scores = _generate(
        model, 1, sampler="beam", num_beams=6, return_all_beams=True
    )
    assert np.all(np.isfinite(scores[:, :4]))
    assert np.all(scores[:, 4:] == -np.inf)
    for row in range(4):
        assert sorted(ids[row, :4, 0]) == [0, 1, 3, 4]  # END written as 0
    np.testing.assert_allclose(
        scores[:, :4],
        _oracle(search.beam_search, model, 1, 4)[1],
        **SCORE_TOL,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=3.0),  # sampler=None: the temperature-only API
        dict(sampler="random", temperature=3.0),
        dict(sampler="top_k", k=2, temperature=3.0),
        dict(sampler="top_p", p=0.9, temperature=3.0),
    ],
    ids=["temperature", "random", "top_k", "top_p"],
)
def test_seeded_sampling_is_reproducible_and_scored(model, kwargs):
    a = _generate(model, seed=7, **kwargs)
    b = _generate(model, seed=7, **kwargs)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    _check_contract(a[0])
    draws = [_generate(model, seed=s, **kwargs)[0] for s in (1, 2, 3)]
    assert any(not np.array_equal(a[0], d) for d in draws)
    # Scores are the sampled ids' log-probabilities at temperature 1.
    np.testing.assert_allclose(
        a[2], _oracle_scores(model, a[0])[0], **SCORE_TOL
    )
    if kwargs.get("sampler") == "top_k":
        # Only the 2 most likely ids of each step can be drawn.
        for d in draws + [a[0]]:
            _check_top_k(model, d, 2)


def _check_top_k(model, ids, k):
    target_in = np.concatenate([np.full((4, 1), START), ids[:, :-1]], 1)
    logits = np_(model((CONTEXT, target_in)))[..., 1:]
    rank = np.argsort(-logits, -1)[..., :k] + 1
    for row in range(4):
        for i in range(int(np.sum(ids[row] != 0))):
            assert ids[row, i] in rank[row, i]


def test_temperature_only_api_is_random_sampling(model):
    old = _generate(model, temperature=3.0, seed=11)
    new = _generate(model, sampler="random", temperature=3.0, seed=11)
    for x, y in zip(old, new):
        np.testing.assert_array_equal(x, y)
    # Default outputs: (ids, attention) only.
    assert len(model.generate(CONTEXT, 5)) == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(sampler="nucleus"), "`sampler` must be one of ('greedy'"),
        (dict(sampler=3), "got 3 (int)"),
        (dict(sampler="top_k", p=0.5), "sampler='top_k' takes no argument 'p'"),
        (dict(sampler="greedy", k=2), "its arguments: none"),
        (dict(sampler="top_k", k=5), "`k` must be an integer in [1, 4]"),
        (dict(sampler="top_p", p=0.0), "`p` must be a finite number > 0.0"),
        (dict(sampler="beam", num_beams=0), "`num_beams` must be an integer"),
        (
            dict(sampler="beam", return_all_beams=1),
            "`return_all_beams` must be True or False",
        ),
        (dict(sampler="greedy", temperature=0.5), "is deterministic"),
        (dict(sampler="beam", temperature=1.0), "is deterministic"),
        (dict(sampler="random", temperature=0.0), "needs a temperature > 0"),
        (dict(temperature=-1.0), "temperature must be >= 0"),
        (dict(seed=-1), "`seed` must be an integer in [0, 2147483647]"),
        (dict(return_scores="yes"), "`return_scores` must be True or False"),
        (
            dict(sampler=keras_hub.samplers.TopKSampler(), k=2),
            "go to the sampler's constructor",
        ),
        (
            dict(sampler=keras_hub.samplers.RandomSampler(), temperature=2.0),
            "set the temperature on the sampler instance",
        ),
        (
            dict(sampler=keras_hub.samplers.ContrastiveSampler()),
            "ContrastiveSampler needs the hidden states",
        ),
    ],
)
def test_bad_sampler_arguments_raise(model, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        model.generate(CONTEXT, 2, **kwargs)
