"""The arguments of `Translator.generate`, `translate` and
`TextTranslator.evaluate` (issue 26, item 11): a wrong type raises a
`TypeError`, a wrong value a `ValueError`, each naming the argument, what
was expected and what arrived, on every backend, before any generation.
No test here runs a decoding loop."""

import math

import numpy as np
import pytest

from kmodels.seq2seq import Translator
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.text_translator import translate

CONTEXT = np.array([[3, 4, 5], [6, 0, 0]], "int32")

# (max_length, the error): an integer >= 1, nothing else.
MAX_LENGTHS = [
    (2.7, TypeError),
    ("3", TypeError),
    (True, TypeError),
    (None, TypeError),
    (math.nan, TypeError),
    (math.inf, TypeError),
    (3.0, TypeError),
    (0, ValueError),
    (-2, ValueError),
]
TEMPERATURES = [
    ("0.5", TypeError),
    (True, TypeError),
    (math.inf, ValueError),
    (math.nan, ValueError),
    (-0.5, ValueError),
]


@pytest.fixture(scope="module")
def bundle():
    source = TextProcessor(max_length=4)
    source.adapt(["hola casa", "esta en casa"])
    target = TextProcessor(max_length=4)
    target.adapt(["hello house", "is at home"])
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        4,
        start_id=target.start_id,
        end_id=target.end_id,
    )
    return model, source, target


def _described(value):
    return f"{value!r} ({type(value).__name__})"


def _raises(error, call):
    with pytest.raises(error) as caught:
        call()
    # Every refusal is a ValueError too (as the constructor checks).
    assert isinstance(caught.value, ValueError)
    return str(caught.value)


@pytest.mark.parametrize("max_length, error", MAX_LENGTHS)
def test_max_length(bundle, max_length, error):
    model, source, target = bundle
    expected = (
        f"`max_length` must be an integer >= 1; got {_described(max_length)}."
    )
    message = _raises(error, lambda: model.generate(CONTEXT, max_length))
    assert message == f"Translator.generate: {expected}"
    if max_length is None:
        # translate's default: the target processor's max_length.
        assert not model.built
        return
    for texts in ("hola", []):  # an empty batch generates nothing
        message = _raises(
            error,
            lambda: translate(texts, model, source, target, max_length),
        )
        assert message == f"translate: {expected}"
    assert not model.built  # refused before anything was built


@pytest.mark.parametrize("temperature, error", TEMPERATURES)
def test_temperature(bundle, temperature, error):
    model, source, target = bundle
    expected = (
        "temperature must be >= 0 and finite, or None; got "
        f"{_described(temperature)}."
    )
    message = _raises(
        error, lambda: model.generate(CONTEXT, 2, temperature=temperature)
    )
    assert message == f"Translator.generate: {expected}"
    message = _raises(
        error,
        lambda: translate("hola", model, source, target, 2, temperature),
    )
    assert message == f"translate: {expected}"


@pytest.mark.parametrize(
    "kwargs, error, expected",
    [
        (
            dict(seed="1"),
            TypeError,
            "`seed` must be an integer in [0, 2147483647]; got '1' (str).",
        ),
        (
            dict(seed=2**31),
            ValueError,
            "`seed` must be an integer in [0, 2147483647]; got 2147483648 "
            "(int).",
        ),
        (
            dict(sampler="top_k", k=2.0),
            TypeError,
            "`k` must be an integer in [1, ",
        ),
        (
            dict(return_scores=1),
            TypeError,
            "`return_scores` must be True or False; got 1 (int).",
        ),
        (
            dict(sampler=["greedy"]),
            TypeError,
            "`sampler` must be one of ('greedy', 'random', 'top_k', "
            "'top_p', 'beam') or a keras_hub.samplers.Sampler; got "
            "['greedy'] (list).",
        ),
    ],
    ids=["seed_str", "seed_range", "k_float", "return_scores", "sampler"],
)
def test_other_generate_arguments(bundle, kwargs, error, expected):
    model, _, _ = bundle
    message = _raises(error, lambda: model.generate(CONTEXT, 2, **kwargs))
    assert expected in message


def test_separator_and_return_attention(bundle):
    model, source, target = bundle
    message = _raises(
        TypeError,
        lambda: translate("hola", model, source, target, separator=5),
    )
    assert message == "translate: `separator` must be a str; got 5 (int)."
    message = _raises(
        TypeError,
        lambda: translate("hola", model, source, target, return_attention=1),
    )
    assert message == (
        "translate: `return_attention` must be True or False; got 1 (int)."
    )
    message = _raises(
        TypeError, lambda: TextTranslator(model, source, target, None)
    )
    assert message == (
        "TextTranslator: `separator` must be a str; got None (NoneType)."
    )
    translator = TextTranslator(model, source, target)
    message = _raises(
        TypeError, lambda: translator.translate("hola", separator=5)
    )
    assert message == "translate: `separator` must be a str; got 5 (int)."


class _Recorder:
    """A `translate` stand-in: records the sources, echoes them."""

    def __init__(self):
        self.sources = []

    def __call__(self, sources, **kwargs):
        self.sources.append(list(sources))
        return list(sources)


def test_evaluate_reads_a_tuple_of_two_lists_as_sources_and_references(
    bundle,
):
    translator = TextTranslator(*bundle)
    translator.translate = recorder = _Recorder()
    # Translations echo the sources: the first pair matches exactly.
    sources, references = ["a b", "c d"], ["a b", "x y"]
    columns = translator.evaluate((sources, references), max_order=1)
    rows = translator.evaluate(list(zip(sources, references)), max_order=1)
    assert recorder.sources == [sources, sources]
    assert columns == rows
    assert columns["count"] == 2 and columns["exact_match"] == 0.5
    # Two lists of two: still (sources, references), never two pairs.
    translator.evaluate((["a", "b"], ["x", "y"]), max_order=1)
    assert recorder.sources[-1] == ["a", "b"]
    # Pairs as lists (JSON) stay pairs in a list.
    translator.evaluate([["a", "x"], ["b", "y"]], max_order=1)
    assert recorder.sources[-1] == ["a", "b"]


@pytest.mark.parametrize(
    "pairs, error, expected",
    [
        (
            (["a", "b"], ["x"]),
            ValueError,
            "(sources, references) must have the same length; got 2 "
            "sources and 1 references.",
        ),
        (
            (["a", 3], ["x", "y"]),
            TypeError,
            "(sources, references) must be two lists of str; sources[1] is "
            "3 (int).",
        ),
        (([], []), ValueError, "expects at least one (source, reference)"),
    ],
    ids=["lengths", "types", "empty"],
)
def test_evaluate_refuses_bad_sources_and_references(
    bundle, pairs, error, expected
):
    translator = TextTranslator(*bundle)
    translator.translate = _Recorder()
    message = _raises(error, lambda: translator.evaluate(pairs))
    assert expected in message
