"""keras-hub sampler instances in `Translator.generate` (issue 26, item 5):
checked as names are, the padding id never produced at any temperature, and
the compiled loops cached by sampler configuration, at most
`decoding.MAX_LOOPS` of them.

One model for the module; every sampling call below runs the same compiled
loop (random sampling: the temperature is an input of the loop), so that
each backend compiles it once (twice for the bound).
"""

import math
import re

import keras
import numpy as np
import pytest
from keras_hub import samplers

from kmodels.seq2seq import Translator
from kmodels.seq2seq import decoding
from kmodels.seq2seq import sampling
from kmodels.seq2seq.constraints import Constraints
from kmodels.testing.oracle import search

np_ = keras.ops.convert_to_numpy

VOCAB_C, VOCAB_T, UNITS, LENGTH = 9, 12, 8, 6
START, END = 1, 2
ROWS = 16
CONTEXT = (
    np.random.default_rng(0).integers(1, VOCAB_C, (ROWS, 4)).astype("int32")
)
# The ids a sampler may choose from: every id but the padding id 0.
IDS = f"[1, {VOCAB_T - 1}]"


@pytest.fixture(scope="module")
def model():
    model = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END)
    model.build((CONTEXT.shape, (ROWS, 1)))
    rng = np.random.default_rng(3)
    model.set_weights(
        [
            rng.uniform(-1.0, 1.0, tuple(w.shape)).astype("float32")
            for w in model.weights
        ]
    )
    return model


def _generate(model, max_length=LENGTH, **kwargs):
    ids, _, scores = model.generate(
        CONTEXT, max_length, return_scores=True, **kwargs
    )
    return np_(ids), np_(scores)


def _oracle_weights(model):
    weights = [w.astype("float64") for w in model.get_weights()]
    n = len(model.encoder.weights)
    return weights[:n], weights[n:]


def _oracle_scores(model, ids):
    """Teacher-forced float64 scores of `ids`, a row's first 0 read as
    `END` (`kmodels.testing.oracle.search`)."""
    encoder_weights, decoder_weights = _oracle_weights(model)
    return search.score_sequences(
        CONTEXT, ids, encoder_weights, decoder_weights, START, END
    )[0]


def _greedy(model, max_length=LENGTH):
    encoder_weights, decoder_weights = _oracle_weights(model)
    ids, _ = search.beam_search(
        CONTEXT, encoder_weights, decoder_weights, START, END, max_length, 1
    )
    return ids[:, 0]


def _check_never_padding(model, ids, scores):
    """Each row is ids != 0 then zeros (END, written as 0, and padding),
    and its first 0 is END: a padding id drawn mid-sequence would end the
    row too, but score log p(padding), far below the oracle's log p(END)."""
    assert ids.shape == (ROWS, LENGTH) and ids.dtype == np.int32
    for row in ids:
        n = int(np.sum(row != 0))
        assert np.all(row[:n] != 0) and np.all(row[n:] == 0)
    np.testing.assert_allclose(
        scores, _oracle_scores(model, ids), rtol=1e-5, atol=1e-5
    )


# (the name's arguments, the same sampler as an instance, the error both
# raise after "(sampler=...): ").
CASES = [
    (dict(sampler="top_k", k=0), samplers.TopKSampler(k=0), ("k", 0, IDS)),
    (
        dict(sampler="top_k", k=VOCAB_T),
        samplers.TopKSampler(k=VOCAB_T),
        ("k", VOCAB_T, IDS),
    ),
    (
        dict(sampler="top_p", p=0.0),
        samplers.TopPSampler(p=0.0),
        ("p", 0.0, " > 0.0 and <= 1.0"),
    ),
    (
        dict(sampler="top_p", p=1.5),
        samplers.TopPSampler(p=1.5),
        ("p", 1.5, " > 0.0 and <= 1.0"),
    ),
    (
        dict(sampler="top_p", p=0.5, k=0),
        samplers.TopPSampler(p=0.5, k=0),
        ("k", 0, IDS),
    ),
    (
        dict(sampler="beam", num_beams=0),
        samplers.BeamSampler(num_beams=0),
        ("num_beams", 0, " >= 1"),
    ),
]


def _expected(name, value, bounds):
    kind = "a finite number" if isinstance(value, float) else "an integer"
    if kind == "an integer" and bounds.startswith("["):
        bounds = f" in {bounds}"
    return (
        f"`{name}` must be {kind}{bounds}; got {value!r} "
        f"({type(value).__name__})."
    )


@pytest.mark.parametrize(
    "by_name, instance, expected",
    CASES,
    ids=["k0", "k_vocabulary", "p0", "p1.5", "top_p_k0", "beams0"],
)
def test_instances_are_checked_as_names(model, by_name, instance, expected):
    message = _expected(*expected)
    with pytest.raises(ValueError) as named:
        model.generate(CONTEXT, LENGTH, **by_name)
    with pytest.raises(ValueError) as given:
        model.generate(CONTEXT, LENGTH, sampler=instance)
    name = by_name["sampler"]
    cls = type(instance).__name__
    assert str(named.value) == (
        f"Translator.generate (sampler={name!r}): {message}"
    )
    assert str(given.value) == f"Translator.generate (sampler={cls}): {message}"
    assert type(named.value) is type(given.value)


@pytest.mark.parametrize(
    "temperature, error",
    [
        (0, ValueError),
        (-1.0, ValueError),
        (math.inf, ValueError),
        (math.nan, ValueError),
        ("0.5", TypeError),
    ],
)
@pytest.mark.parametrize(
    "cls",
    [
        samplers.RandomSampler,
        samplers.TopKSampler,
        samplers.TopPSampler,
        samplers.GreedySampler,
        samplers.BeamSampler,
    ],
)
def test_an_instance_temperature_must_be_finite_and_positive(
    model, cls, temperature, error
):
    with pytest.raises(error) as caught:
        model.generate(CONTEXT, LENGTH, sampler=cls(temperature=temperature))
    assert str(caught.value) == (
        f"Translator.generate (sampler={cls.__name__}): `temperature` must "
        f"be a finite number > 0.0; got {temperature!r} "
        f"({type(temperature).__name__})."
    )
    # A wrong type is a TypeError and a ValueError (as the other checks).
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=1e12),
        dict(temperature=1e300),  # finite, beyond float32
        dict(sampler=samplers.RandomSampler(temperature=1e12)),
    ],
    ids=["1e12", "1e300", "instance"],
)
def test_padding_is_never_produced_at_a_huge_temperature(model, kwargs):
    ids, scores = _generate(model, seed=5, **kwargs)
    _check_never_padding(model, ids, scores)
    # Near-uniform over every id but 0: most ids are seen.
    assert len(set(ids.ravel().tolist()) - {0}) > VOCAB_T // 2


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=1e-45),
        dict(sampler=samplers.RandomSampler(temperature=1e-45)),
        dict(sampler=samplers.RandomSampler(temperature=1e-50)),
    ],
    ids=["1e-45", "instance", "instance_1e-50"],
)
def test_a_tiny_temperature_samples_the_most_likely_ids(model, kwargs):
    ids, scores = _generate(model, seed=5, **kwargs)
    _check_never_padding(model, ids, scores)
    np.testing.assert_array_equal(ids, _greedy(model))


def test_refused_temperatures_of_generate(model):
    for temperature, error in (
        (math.inf, ValueError),
        (-math.inf, ValueError),
        (math.nan, ValueError),
        ("0.5", TypeError),
        (True, TypeError),
    ):
        with pytest.raises(error) as caught:
            model.generate(CONTEXT, LENGTH, temperature=temperature)
        assert str(caught.value) == (
            "Translator.generate: temperature must be >= 0 and finite, or "
            f"None; got {temperature!r} ({type(temperature).__name__})."
        )


def test_an_equal_sampler_reuses_the_compiled_loop(model):
    reference = _generate(model, sampler="random", temperature=0.5, seed=4)
    count = decoding.loop_count(model)
    # Equal configurations (the temperature and seed are inputs of the
    # loop): a new instance, another temperature or seed, the name.
    for sampler in (
        samplers.RandomSampler(temperature=0.5),
        samplers.RandomSampler(temperature=2.0, seed=9),
        samplers.RandomSampler(temperature=0.5),
    ):
        ids, scores = _generate(model, sampler=sampler, seed=4)
        if sampler.temperature == 0.5:
            # The same draws as the name with the same seed.
            np.testing.assert_array_equal(ids, reference[0])
            np.testing.assert_array_equal(scores, reference[1])
        assert decoding.loop_count(model) == count
    _generate(model, sampler="random", temperature=3.0)
    assert decoding.loop_count(model) == count


def test_an_instance_continues_its_own_stream(model):
    # Without `seed`, an instance draws from its own stream, which each
    # call advances; a seeded call restarts from the seed.
    sampler = samplers.RandomSampler(temperature=3.0, seed=11)
    first = _generate(model, sampler=sampler)[0]
    second = _generate(model, sampler=sampler)[0]
    assert not np.array_equal(first, second)
    fresh = samplers.RandomSampler(temperature=3.0, seed=11)
    np.testing.assert_array_equal(_generate(model, sampler=fresh)[0], first)
    np.testing.assert_array_equal(
        _generate(model, sampler=fresh, seed=11)[0], first
    )


def test_the_loop_cache_is_bounded(model, monkeypatch):
    """More configurations than the bound: the least recently used loop is
    dropped. A new `max_length` is a new configuration too."""
    _generate(model, temperature=0.5, seed=1)
    monkeypatch.setattr(decoding, "MAX_LOOPS", 1)
    # A second configuration: another max_length.
    ids, _ = _generate(model, LENGTH - 1, temperature=0.5, seed=1)
    assert ids.shape == (ROWS, LENGTH - 1)
    assert decoding.loop_count(model) == 1
    assert (LENGTH - 1, *_plan_key()) in model._generators
    assert (LENGTH, *_plan_key()) not in model._generators


def _plan_key():
    """The sampler's part of a loop's key, and the constraints' (none)."""
    return (
        sampling.plan(None, 0.5, 1, {}, VOCAB_T, "test").key,
        Constraints().key,
    )


def test_bad_instance_refused_before_any_change(model):
    sampler = samplers.TopKSampler(k=0, seed=3)
    state = np_(sampler.variables[0])
    with pytest.raises(ValueError, match=re.escape("`k` must be")):
        model.generate(CONTEXT, LENGTH, sampler=sampler, seed=1)
    np.testing.assert_array_equal(np_(sampler.variables[0]), state)
