"""`Translator.generate`'s constraints (`length_penalty`, `min_length`,
`no_repeat_ngram_size`, `banned_ids`) against the NumPy search oracle
(`kmodels.testing.oracle.search`), which applies them from their
definitions one sequence at a time: exhaustive search for beam search with
enough beams, step-by-step argmax for greedy decoding.

On TensorFlow and JAX these run keras-hub's compiled loops; on torch the
native greedy and beam loops (`kmodels.backend.decoding`), and keras-hub's
loop for a `BeamSampler` subclass and for sampling."""

import keras
import keras_hub
import numpy as np
import pytest

from kmodels.seq2seq import Translator
from kmodels.seq2seq import decoding
from kmodels.testing.oracle import search

np_ = keras.ops.convert_to_numpy

# Target vocabulary 5 (padding, START, END and two more ids) and at most 3
# generated ids: the oracle enumerates every sequence.
VOCAB_C, VOCAB_T, UNITS, LENGTH = 7, 5, 4, 3
START, END = 1, 2
CONTEXT = np.array(
    [[3, 4, 5, 6, 1], [6, 1, 2, 0, 0], [2, 0, 0, 0, 0], [5, 5, 3, 2, 0]],
    "int32",
)
# With 4 candidate ids and 3 steps, beam search meets at most 1 + 3 + 9
# ended and 27 live hypotheses, and scores 9 * 4 + 4 = 40 at the last
# step: 40 beams keep every sequence, so the best one after the length
# penalty's re-ranking is the exhaustive optimum.
WIDE = 40
# float32 log-softmax sums of <= 3 terms against float64 (a length
# penalty divides them by at most 3 ** 1.5): measured < 3e-6.
SCORE_TOL = dict(rtol=1e-5, atol=1e-5)
# Each alone and in combination; options with the same n-gram size share
# one compiled loop (the other values are inputs of the loop).
OPTIONS = {
    "length_penalty": dict(length_penalty=1.0),
    "negative_length_penalty": dict(length_penalty=-0.7),
    "min_length": dict(min_length=3),
    "no_repeat_1": dict(no_repeat_ngram_size=1),
    "banned_ids": dict(banned_ids=[4]),
    "all": dict(
        length_penalty=1.5,
        min_length=2,
        no_repeat_ngram_size=2,
        banned_ids=(4,),
    ),
    "all_other_values": dict(
        length_penalty=0.5,
        min_length=3,
        no_repeat_ngram_size=2,
        banned_ids=np.array([1]),
    ),
}


@pytest.fixture(scope="module")
def model():
    """Weights uniform in [-1.5, 1.5] from seed 24 (those of
    `generate_test.py`: greedy rows differ, one row ends at once, beam
    search beats greedy on three rows)."""
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


def _oracle(function, model, *args, **options):
    weights = [w.astype("float64") for w in model.get_weights()]
    n = len(model.encoder.weights)
    options = dict(options)
    if "banned_ids" in options:
        options["banned_ids"] = [int(i) for i in options["banned_ids"]]
    return function(
        CONTEXT, weights[:n], weights[n:], START, END, *args, **options
    )


def _generate(model, **kwargs):
    outputs = model.generate(CONTEXT, LENGTH, return_scores=True, **kwargs)
    return tuple(map(np_, outputs))


def _sequence(ids):
    """The generated ids of one output row, the end id put back: a row
    shorter than `LENGTH` ended with `END`."""
    n = int(np.sum(ids != 0))
    return tuple(int(i) for i in ids[:n]) + ((END,) if n < LENGTH else ())


def _obeys(sequence, min_length=0, no_repeat_ngram_size=0, banned_ids=(), **_):
    """The constraints checked on a whole sequence, from their wording."""
    if set(sequence) & set(int(i) for i in banned_ids):
        return False
    if sequence[-1] == END and len(sequence) < min_length:
        return False
    n = no_repeat_ngram_size
    if n:
        grams = [sequence[j : j + n] for j in range(len(sequence) - n + 1)]
        if len(grams) != len(set(grams)):
            return False
    return True


def _forced(model, context, ids, repetition_penalty=1.0):
    """Teacher-forced oracle scores and attention of outputs `ids`."""
    weights = [w.astype("float64") for w in model.get_weights()]
    n = len(model.encoder.weights)
    return search.score_sequences(
        context,
        ids,
        weights[:n],
        weights[n:],
        START,
        END,
        repetition_penalty,
    )


def _penalised(scores, ids, length_penalty=0.0, **_):
    lengths = np.array([len(_sequence(row)) for row in ids])
    return scores / lengths.astype("float64") ** length_penalty


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_wide_beam_equals_exhaustive_search(model, options):
    ids, attention, scores = _generate(
        model, sampler="beam", num_beams=WIDE, return_all_beams=True, **options
    )
    expected_ids, expected_scores = _oracle(
        search.exhaustive_search, model, LENGTH, **options
    )
    np.testing.assert_array_equal(ids[:, 0], expected_ids)
    np.testing.assert_allclose(scores[:, 0], expected_scores, **SCORE_TOL)
    # Every real beam obeys the constraints, is ranked by its normalised
    # score, and that score is the model's own log-probability (teacher
    # forced by the oracle) over its length ** length_penalty.
    real = np.isfinite(scores)
    assert np.all(np.diff(scores, axis=1)[real[:, 1:]] <= 1e-6)
    for row in range(len(CONTEXT)):
        for beam in np.flatnonzero(real[row]):
            assert _obeys(_sequence(ids[row, beam]), **options)
    rows, beams = np.nonzero(real)
    forced, forced_attention = _forced(model, CONTEXT[rows], ids[rows, beams])
    np.testing.assert_allclose(
        scores[rows, beams],
        _penalised(forced, ids[rows, beams], **options),
        **SCORE_TOL,
    )
    np.testing.assert_allclose(
        attention[rows, beams], forced_attention, atol=1e-5
    )


# Greedy decoding masks with the same code as beam search on TensorFlow and
# JAX (torch has its own greedy loop): each n-gram size of OPTIONS.
GREEDY = ("min_length", "no_repeat_1", "all", "all_other_values")


@pytest.mark.parametrize("name", GREEDY)
def test_greedy_is_the_stepwise_argmax_under_the_constraints(model, name):
    options = OPTIONS[name]
    ids, _, scores = _generate(model, sampler="greedy", **options)
    expected_ids, expected_scores = _oracle(
        search.beam_search, model, LENGTH, 1, **options
    )
    np.testing.assert_array_equal(ids, expected_ids[:, 0])
    np.testing.assert_allclose(scores, expected_scores[:, 0], **SCORE_TOL)


def test_the_options_change_the_outputs(model):
    """The model and options above are not vacuous (by the oracle): each
    constraint changes the best sequence of some row, and no-repeat and
    the minimum length change a greedy row."""
    plain = _oracle(search.exhaustive_search, model, LENGTH)[0]
    for name in ("length_penalty", "min_length", "no_repeat_1", "banned_ids"):
        constrained = _oracle(
            search.exhaustive_search, model, LENGTH, **OPTIONS[name]
        )[0]
        assert np.any(constrained != plain), name
    greedy = _oracle(search.beam_search, model, LENGTH, 1)[0][:, 0]
    for name in ("no_repeat_1", "min_length"):
        constrained = _oracle(
            search.beam_search, model, LENGTH, 1, **OPTIONS[name]
        )[0][:, 0]
        assert np.any(constrained != greedy), name


def test_a_row_with_no_allowed_id_stops_at_minus_infinity(model):
    """With ids 3 and 4 banned, no id repeated and at least 3 ids, every
    row must start with 1 (END is too early), and then has no id left."""
    options = dict(banned_ids=[3, 4], no_repeat_ngram_size=1, min_length=3)
    ids, attention, scores = _generate(model, sampler="greedy", **options)
    np.testing.assert_array_equal(ids, np.tile([[1, 0, 0]], (4, 1)))
    assert np.all(scores == -np.inf)
    assert np.all(attention[:, 1:] == 0)
    _, _, beam_scores = _generate(
        model, sampler="beam", num_beams=WIDE, return_all_beams=True, **options
    )
    assert np.all(beam_scores == -np.inf)


class _HubBeam(keras_hub.samplers.BeamSampler):
    """A subclass: `generate` runs keras-hub's own beam loop with it on
    every backend (kmodels' own beam loops take the plain class only)."""


def test_keras_hubs_beam_loop_applies_the_constraints(model):
    options = OPTIONS["all"]
    sampler = _HubBeam(num_beams=WIDE, return_all_beams=True)
    ids, _, scores = _generate(model, sampler=sampler, **options)
    expected_ids, expected_scores = _oracle(
        search.exhaustive_search, model, LENGTH, **options
    )
    np.testing.assert_array_equal(ids[:, 0], expected_ids)
    np.testing.assert_allclose(scores[:, 0], expected_scores, **SCORE_TOL)


def _sample_hot(model, options):
    """Eight samples of each context at temperature 5 under `options`:
    `(context, ids, scores, sequences)`."""
    context = np.repeat(CONTEXT, 8, axis=0)
    ids, _, scores = map(
        np_,
        model.generate(
            context,
            LENGTH,
            sampler="random",
            temperature=5.0,
            seed=3,
            return_scores=True,
            **options,
        ),
    )
    return context, ids, scores, [_sequence(row) for row in ids]


def test_sampling_obeys_the_constraints_and_keeps_model_scores(model):
    """At a high temperature the constraints are what keeps sampled rows
    from banned ids and repeats; scores stay the model's log-probabilities
    (not renormalised over the allowed ids), divided by the length
    penalty."""
    options = OPTIONS["all"]
    context, ids, scores, sequences = _sample_hot(model, options)
    assert all(_obeys(s, **options) for s in sequences)
    assert len(set(sequences)) >= 4  # it does sample
    forced, _ = _forced(model, context, ids)
    np.testing.assert_allclose(
        scores, _penalised(forced, ids, **options), **SCORE_TOL
    )


def test_the_defaults_give_the_unconstrained_output_exactly(model):
    # The unconstrained loop, for every sampler (beam search here).
    sampler = dict(sampler="beam", num_beams=WIDE, return_all_beams=True)
    plain = _generate(model, **sampler)
    count = decoding.loop_count(model)
    defaults = _generate(
        model,
        **sampler,
        length_penalty=0.0,
        min_length=0,
        no_repeat_ngram_size=0,
        banned_ids=None,
    )
    for a, b in zip(plain, defaults):
        np.testing.assert_array_equal(a, b)
    # The same compiled loop; other values of one structure share one too.
    assert decoding.loop_count(model) == count
    _generate(model, **sampler, banned_ids=[3])
    count = decoding.loop_count(model)
    _generate(model, **sampler, banned_ids=[1, 4])
    assert decoding.loop_count(model) == count


@pytest.mark.parametrize(
    "options, error, message",
    [
        (
            dict(length_penalty=float("nan")),
            ValueError,
            "`length_penalty` must be a finite real number",
        ),
        (
            dict(length_penalty=float("inf")),
            ValueError,
            "`length_penalty` must be a finite real number",
        ),
        (
            dict(length_penalty="1.0"),
            TypeError,
            r"`length_penalty` must be a finite real number .*'1.0' \(str\)",
        ),
        (
            dict(min_length=-1),
            ValueError,
            r"`min_length` must be an integer >= 0; got -1 \(int\)",
        ),
        (
            dict(min_length=4),
            ValueError,
            r"`min_length` must be <= max_length \(3\).*got 4",
        ),
        (
            dict(min_length=2.0),
            TypeError,
            r"`min_length` must be an integer >= 0; got 2.0 \(float\)",
        ),
        (
            dict(no_repeat_ngram_size=-2),
            ValueError,
            r"`no_repeat_ngram_size` must be an integer >= 0; got -2",
        ),
        (
            dict(banned_ids=[5]),
            ValueError,
            r"`banned_ids` must be an integer in \[0, 4\]; got 5 \(int\)",
        ),
        (
            dict(banned_ids=[-1]),
            ValueError,
            r"`banned_ids` must be an integer in \[0, 4\]; got -1",
        ),
        (
            dict(banned_ids=3),
            TypeError,
            r"`banned_ids` must be a sequence of integer ids in \[0, 5\)",
        ),
        (
            dict(banned_ids=[1, 2, 3, 4]),
            ValueError,
            r"`banned_ids` bans every id the model can generate \(1 to 4",
        ),
    ],
)
def test_bad_values_are_refused_before_anything_runs(
    model, options, error, message
):
    count = decoding.loop_count(model)
    with pytest.raises(error, match="Translator.generate: " + message):
        model.generate(CONTEXT, LENGTH, sampler="beam", **options)
    assert decoding.loop_count(model) == count


# `repetition_penalty` and `prefix` (one processor class each), alone and
# with every other constraint; options of one structure share a loop.
PROCESSOR_OPTIONS = {
    "repetition_penalty": dict(repetition_penalty=2.0),
    "repetition_penalty_below_1": dict(repetition_penalty=0.5),
    "prefix": dict(prefix=[3]),
    "prefix_repeated": dict(prefix=[4, 4]),
    "prefix_with_end": dict(prefix=[3, END]),
    "prefix_penalty_and_all": dict(
        prefix=[1],
        repetition_penalty=1.5,
        length_penalty=1.0,
        min_length=3,
        no_repeat_ngram_size=2,
        banned_ids=[4],
    ),
}


def _obeys_all(sequence, prefix=(), **options):
    """`_obeys`, and the sequence starts with `prefix`."""
    return _obeys(sequence, **options) and (
        sequence[: len(prefix)] == tuple(prefix)
    )


@pytest.mark.parametrize(
    "options", PROCESSOR_OPTIONS.values(), ids=PROCESSOR_OPTIONS.keys()
)
def test_new_processors_wide_beam_equals_exhaustive_search(model, options):
    ids, attention, scores = _generate(
        model, sampler="beam", num_beams=WIDE, return_all_beams=True, **options
    )
    expected_ids, expected_scores = _oracle(
        search.exhaustive_search, model, LENGTH, **options
    )
    np.testing.assert_array_equal(ids[:, 0], expected_ids)
    np.testing.assert_allclose(scores[:, 0], expected_scores, **SCORE_TOL)
    # Every real beam obeys the constraints and scores the log-probability
    # of the penalised logits (teacher forced by the oracle) over its
    # length ** length_penalty; the forced ids score the model's own.
    real = np.isfinite(scores)
    for row in range(len(CONTEXT)):
        for beam in np.flatnonzero(real[row]):
            assert _obeys_all(_sequence(ids[row, beam]), **options)
    rows, beams = np.nonzero(real)
    forced, forced_attention = _forced(
        model,
        CONTEXT[rows],
        ids[rows, beams],
        options.get("repetition_penalty", 1.0),
    )
    np.testing.assert_allclose(
        scores[rows, beams],
        _penalised(forced, ids[rows, beams], **options),
        **SCORE_TOL,
    )
    np.testing.assert_allclose(
        attention[rows, beams], forced_attention, atol=1e-5
    )


@pytest.mark.parametrize(
    "options", PROCESSOR_OPTIONS.values(), ids=PROCESSOR_OPTIONS.keys()
)
def test_new_processors_greedy_is_the_stepwise_argmax(model, options):
    ids, _, scores = _generate(model, sampler="greedy", **options)
    expected_ids, expected_scores = _oracle(
        search.beam_search, model, LENGTH, 1, **options
    )
    np.testing.assert_array_equal(ids, expected_ids[:, 0])
    np.testing.assert_allclose(scores, expected_scores[:, 0], **SCORE_TOL)


def test_new_processors_in_keras_hubs_beam_loop(model):
    options = PROCESSOR_OPTIONS["prefix_penalty_and_all"]
    sampler = _HubBeam(num_beams=WIDE, return_all_beams=True)
    ids, _, scores = _generate(model, sampler=sampler, **options)
    expected_ids, expected_scores = _oracle(
        search.exhaustive_search, model, LENGTH, **options
    )
    np.testing.assert_array_equal(ids[:, 0], expected_ids)
    np.testing.assert_allclose(scores[:, 0], expected_scores, **SCORE_TOL)


def test_new_processors_change_the_outputs(model):
    """Not vacuous (by the oracle): each changes the best sequence of some
    row, and the penalty > 1 and the prefix some greedy row (greedy rows
    repeat already: a penalty < 1 keeps them)."""
    plain = _oracle(search.exhaustive_search, model, LENGTH)[0]
    greedy = _oracle(search.beam_search, model, LENGTH, 1)[0][:, 0]
    for name in ("repetition_penalty", "repetition_penalty_below_1", "prefix"):
        options = PROCESSOR_OPTIONS[name]
        best = _oracle(search.exhaustive_search, model, LENGTH, **options)[0]
        assert np.any(best != plain), name
        if name == "repetition_penalty_below_1":
            continue
        first = _oracle(search.beam_search, model, LENGTH, 1, **options)[0]
        assert np.any(first[:, 0] != greedy), name


def test_sampling_obeys_the_new_processors(model):
    """Sampled rows start with the prefix; scores are the log-probabilities
    of the penalised logits (the forced ids' too)."""
    options = PROCESSOR_OPTIONS["prefix_penalty_and_all"]
    context, ids, scores, sequences = _sample_hot(model, options)
    assert all(_obeys_all(s, **options) for s in sequences)
    assert len(set(sequences)) >= 2  # it does sample
    forced, _ = _forced(model, context, ids, options["repetition_penalty"])
    np.testing.assert_allclose(
        scores, _penalised(forced, ids, **options), **SCORE_TOL
    )


def test_new_processor_values_share_one_compiled_loop(model):
    sampler = dict(sampler="beam", num_beams=WIDE, return_all_beams=True)
    _generate(model, **sampler, repetition_penalty=1.5, prefix=[3])
    count = decoding.loop_count(model)
    _, _, scores = _generate(
        model, **sampler, repetition_penalty=3.0, prefix=[4, 3]
    )
    assert decoding.loop_count(model) == count
    expected = _oracle(
        search.exhaustive_search,
        model,
        LENGTH,
        repetition_penalty=3.0,
        prefix=[4, 3],
    )[1]
    np.testing.assert_allclose(scores[:, 0], expected, **SCORE_TOL)


def test_length_penalty_ranks_finished_beams_at_the_end(model):
    """Beam search ranks by summed log-probability during the search and
    by the penalised score at the end (`docs/decoding.md`): with 2 beams
    its beams are the oracle's beam search under that rule; with enough
    beams, the exhaustive optimum (test_wide_beam_equals_exhaustive_search)."""
    options = dict(length_penalty=2.0)
    ids, _, scores = _generate(
        model, sampler="beam", num_beams=2, return_all_beams=True, **options
    )
    expected_ids, expected_scores = _oracle(
        search.beam_search, model, LENGTH, 2, **options
    )
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, **SCORE_TOL)


@pytest.mark.parametrize(
    "options, error, message",
    [
        (
            dict(repetition_penalty=0),
            ValueError,
            r"`repetition_penalty` must be a finite number > 0.0; got 0 ",
        ),
        (
            dict(repetition_penalty=-1.5),
            ValueError,
            r"`repetition_penalty` must be a finite number > 0.0; got -1.5",
        ),
        (
            dict(repetition_penalty=float("nan")),
            ValueError,
            r"`repetition_penalty` must be a finite number > 0.0; got nan",
        ),
        (
            dict(repetition_penalty=float("inf")),
            ValueError,
            r"`repetition_penalty` must be a finite number > 0.0; got inf",
        ),
        (
            dict(repetition_penalty="2"),
            TypeError,
            r"`repetition_penalty` must be a finite number > 0.0; got '2'",
        ),
        (
            dict(repetition_penalty=True),
            TypeError,
            r"`repetition_penalty` must be .*; got True \(bool\)",
        ),
        (
            dict(prefix=[0]),
            ValueError,
            r"`prefix` must be an integer in \[1, 4\]; got 0 \(int\)",
        ),
        (
            dict(prefix=[3, 5]),
            ValueError,
            r"`prefix` must be an integer in \[1, 4\]; got 5 \(int\)",
        ),
        (
            dict(prefix=[3.0]),
            TypeError,
            r"`prefix` must be an integer in \[1, 4\]; got 3.0 \(float\)",
        ),
        (
            dict(prefix=3),
            TypeError,
            r"`prefix` must be a sequence of integer ids in \[1, 5\)",
        ),
        (
            dict(prefix=[[3, 4]]),
            TypeError,
            r"`prefix` must be a flat list of token ids",
        ),
        (
            dict(prefix=[3, 4, 3, 4]),
            ValueError,
            r"`prefix` must hold at most max_length \(3\) ids; got 4",
        ),
    ],
)
def test_new_processors_refuse_bad_values(model, options, error, message):
    count = decoding.loop_count(model)
    with pytest.raises(error, match="Translator.generate: " + message):
        model.generate(CONTEXT, LENGTH, sampler="beam", **options)
    with pytest.raises(error, match="Translator.search_step: " + message):
        model.search_step(CONTEXT, LENGTH, sampler="beam", **options)
    assert decoding.loop_count(model) == count


def test_search_step_refuses_an_unknown_option(model):
    with pytest.raises(
        TypeError,
        match=r"Translator.search_step: unknown decoding option\(s\) "
        r"\['repetition'\]; the constraints are \['length_penalty'",
    ):
        model.search_step(CONTEXT, LENGTH, repetition=1.2)


def test_search_step_returns_generates_beams_under_the_new_processors(model):
    options = PROCESSOR_OPTIONS["prefix_penalty_and_all"]
    ids, scores = map(
        np_,
        model.search_step(
            CONTEXT, LENGTH, "beam", WIDE, num_return_sequences=3, **options
        ),
    )
    expected = _generate(
        model, sampler="beam", num_beams=WIDE, return_all_beams=True, **options
    )
    np.testing.assert_array_equal(ids, expected[0][:, :3])
    np.testing.assert_allclose(scores, expected[2][:, :3], **SCORE_TOL)


def test_search_step_returns_the_attention_of_its_sequences(model):
    """`return_attention=True`: the cross-attention weights of the n best
    (beam) or the one sequence (greedy), those `generate` returns."""
    options = PROCESSOR_OPTIONS["prefix_penalty_and_all"]
    ids, scores, attention = map(
        np_,
        model.search_step(
            CONTEXT,
            LENGTH,
            "beam",
            WIDE,
            num_return_sequences=2,
            return_attention=True,
            **options,
        ),
    )
    expected = _generate(
        model, sampler="beam", num_beams=WIDE, return_all_beams=True, **options
    )
    np.testing.assert_array_equal(ids, expected[0][:, :2])
    np.testing.assert_allclose(attention, expected[1][:, :2], **SCORE_TOL)
    ids, _, attention = map(
        np_, model.search_step(CONTEXT, LENGTH, return_attention=True)
    )
    greedy = _generate(model)
    np.testing.assert_array_equal(ids[:, 0], greedy[0])
    np.testing.assert_allclose(attention[:, 0], greedy[1], **SCORE_TOL)
    with pytest.raises(TypeError) as caught:
        model.search_step(CONTEXT, LENGTH, return_attention="yes")
    assert str(caught.value).startswith(
        "Translator.search_step: `return_attention` must be"
    )


def test_num_return_sequences_is_the_best_of_every_beam(model):
    # Hugging Face's name, beside keras-hub's `return_all_beams`: the n
    # best beams, a sequence axis of n after the batch (also for n = 1).
    beam = dict(sampler="beam", num_beams=WIDE)
    every = _generate(model, return_all_beams=True, **beam)
    best_two = _generate(model, num_return_sequences=2, **beam)
    assert best_two[0].shape == (len(CONTEXT), 2, LENGTH)
    for got, expected in zip(best_two, every):
        np.testing.assert_array_equal(got, expected[:, :2])
    greedy = _generate(model)
    one = _generate(model, num_return_sequences=1)
    for got, expected in zip(one, greedy):
        np.testing.assert_array_equal(got, expected[:, None])
    for kwargs, message in (
        (dict(num_return_sequences=2), r"in \[1, 1\]; got 2"),
        (dict(num_return_sequences=WIDE + 1, **beam), r"in \[1, "),
        (
            dict(num_return_sequences=2, return_all_beams=True, **beam),
            "not both",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            model.generate(CONTEXT, LENGTH, **kwargs)
