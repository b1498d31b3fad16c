"""translate() and TextTranslator: strings in, strings out."""

import keras
import numpy as np
import pytest

from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.text_translator import translate
from kmodels.seq2seq.translator import Translator


def _bundle(units=4):
    source = TextProcessor(max_length=6)
    source.adapt(["hola casa", "esta en casa", "hola"])
    target = TextProcessor(max_length=5)
    target.adapt(["hello house", "is at home", "hello"])
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        units,
        start_id=target.start_id,
        end_id=target.end_id,
    )
    return model, source, target


def _expected(model, source, target, texts, max_length):
    """What translate() must return: generate() on the processed ids, then
    the target tokens up to [END] (generate pads with 0 from there)."""
    ids, attention = model.generate(source(texts), max_length=max_length)
    ids = keras.ops.convert_to_numpy(ids)
    vocab = target.vocabulary
    out = []
    for row in ids:
        words = []
        # A leading [START] is dropped (an untrained model may emit it).
        for i in row[1:] if row[0] == target.start_id else row:
            if i == 0:
                break
            words.append(vocab[i])
        out.append(" ".join(words))
    return out, keras.ops.convert_to_numpy(attention)


def test_translate_returns_strings_from_generate():
    keras.utils.set_random_seed(0)
    model, source, target = _bundle()
    texts = ["Hola, casa!", "está en casa"]
    got = translate(texts, model, source, target)
    assert isinstance(got, list) and all(isinstance(s, str) for s in got)
    expected, _ = _expected(model, source, target, texts, target.max_length)
    assert got == expected
    # One str in, one str out; the attention comes back with it:
    # (batch, max_length, context length), equal to generate()'s (the same
    # computation: 1e-6).
    one, attention = translate(
        "Hola, casa!",
        model,
        source,
        target,
        max_length=3,
        return_attention=True,
    )
    ref_text, ref = _expected(model, source, target, texts[:1], 3)
    assert isinstance(one, str) and one == ref_text[0]
    assert attention.shape == (1, 3, source.max_length)
    np.testing.assert_allclose(attention, ref, rtol=1e-6, atol=1e-6)
    assert translate([], model, source, target) == []


def test_text_translator_save_load(tmp_path):
    keras.utils.set_random_seed(1)
    model, source, target = _bundle()
    bundle = TextTranslator(model, source, target, separator="_")
    texts = ["hola casa", "esta en casa hola hola hola"]
    before = bundle(texts)
    assert before == [
        s.replace(" ", "_") for s in bundle.translate(texts, separator=" ")
    ]
    bundle.save(str(tmp_path / "t"))
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "text.json",
        "translator.keras",
    ]
    loaded = TextTranslator.load(str(tmp_path / "t"))
    assert loaded(texts) == before
    assert loaded.separator == "_"
    assert loaded.context_processor.get_config() == source.get_config()
    assert loaded.target_processor.get_config() == target.get_config()


def test_mismatched_vocabularies_raise():
    model, source, target = _bundle()
    bigger = TextProcessor(max_length=6)
    bigger.adapt(["hola casa", "esta en casa", "hola", "y mas palabras"])
    with pytest.raises(
        ValueError,
        match=r"context_processor has 11 tokens but the translator's "
        r"context_vocabulary_size is 8: its ids would be out of range",
    ):
        translate("hola", model, bigger, target)
    with pytest.raises(ValueError, match="target_processor has 11 tokens"):
        TextTranslator(
            Translator(8, 12, 4, start_id=2, end_id=3), source, bigger
        )
    with pytest.raises(ValueError, match="start_id is 4 but the target"):
        translate(
            "hola",
            Translator(8, target.vocabulary_size, 4, start_id=4, end_id=3),
            source,
            target,
        )


def test_out_of_range_ids_on_the_translate_path_raise():
    # Ids the processor produces but the model cannot embed: the size check
    # above stops them; generate() itself rejects such ids too.
    model, source, target = _bundle()
    too_big = np.array([[2, source.vocabulary_size, 3]])
    with pytest.raises(ValueError, match=r"must lie in \[0, 8\)"):
        model.generate(too_big, max_length=2)
    with pytest.raises(ValueError, match="empty text at index 0"):
        translate(["", "hola"], model, source, target)
    with pytest.raises(ValueError, match="expects a kmodels.seq2seq"):
        translate("hola", object(), source, target)


def _constant_bundle(token):
    """A bundle whose translator emits `token` at every step, whatever the
    source: the output layer's kernel is zero and its bias favours that
    token (max_length 5: five tokens unless it is [END])."""
    model, source, target = _bundle()
    model.build(((1, source.max_length), (1, 1)))
    output = model.decoder.output_layer
    output.kernel.assign(np.zeros(output.kernel.shape, "float32"))
    bias = np.zeros(output.bias.shape, "float32")
    bias[target.vocabulary.index(token)] = 10.0
    output.bias.assign(bias)
    return TextTranslator(model, source, target)


def test_evaluate_bleu_and_exact_match_by_hand():
    bundle = _constant_bundle("house")
    five = "house house house house house"
    assert bundle.translate(["hola", "casa"]) == [five, five]
    pairs = [
        ("hola", five),  # exact
        ("casa", five + " home"),  # one word longer
        ("esta en casa", "hello house house house house"),
    ]
    # Clipped n-gram matches / candidate n-grams over the corpus, order 1
    # to 4: 5+5+4 of 15, 4+4+3 of 12, 3+3+2 of 9, 2+2+1 of 6; candidate
    # length 15, reference length 5+6+5 = 16, brevity penalty
    # exp(1 - 16/15).
    precisions = [14 / 15, 11 / 12, 8 / 9, 5 / 6]
    penalty = np.exp(1.0 - 16.0 / 15.0)
    scores = bundle.evaluate(pairs)
    assert scores["count"] == 3
    assert scores["exact_match"] == 1 / 3
    # Bleu keeps float32 state: 1e-6.
    np.testing.assert_allclose(
        scores["bleu"],
        penalty * np.prod(precisions) ** (1 / 4),
        rtol=1e-6,
    )
    bigrams = bundle.evaluate(pairs, max_order=2)
    np.testing.assert_allclose(
        bigrams["bleu"], penalty * np.sqrt(14 / 15 * 11 / 12), rtol=1e-6
    )
    # References equal to the translations: 1 and 1.
    perfect = bundle.evaluate([("hola", five), ("casa hola", five)])
    assert perfect["exact_match"] == 1.0
    np.testing.assert_allclose(perfect["bleu"], 1.0, rtol=1e-6)
    # translate's keywords go through: 2 tokens against 5, no 3-gram.
    short = bundle.evaluate([("hola", five)], max_length=2, max_order=2)
    np.testing.assert_allclose(short["bleu"], np.exp(1.0 - 5.0 / 2.0))
    assert short["exact_match"] == 0.0


def test_evaluate_empty_translations_and_bad_pairs():
    bundle = _constant_bundle("[END]")
    assert bundle.translate(["hola"]) == [""]
    # No candidate token: BLEU 0 (keras-hub would divide by 0).
    scores = bundle.evaluate([("hola", "hello"), ("casa", "house")])
    assert scores == {"bleu": 0.0, "exact_match": 0.0, "count": 2}
    with pytest.raises(ValueError, match="at least one"):
        bundle.evaluate([])
    with pytest.raises(ValueError, match="item 1 is 'casa'"):
        bundle.evaluate([("hola", "hello"), "casa"])
    with pytest.raises(ValueError, match="got a str"):
        bundle.evaluate("hola")
    with pytest.raises(ValueError, match="reference of item 0"):
        bundle.evaluate([("hola", "  ")])
    with pytest.raises(ValueError, match="max_order"):
        bundle.evaluate([("hola", "hello")], max_order=0)
    with pytest.raises(ValueError, match="smooth"):
        bundle.evaluate([("hola", "hello")], smooth="yes")


def test_translate_takes_generates_samplers_and_constraints():
    """Beam search with every beam, scores and constraints: the strings
    and scores of `generate` on the processed ids, with the same
    arguments; an empty batch keeps the shapes."""
    keras.utils.set_random_seed(2)
    model, source, target = _bundle()
    texts = ["hola casa", "esta en casa"]
    options = dict(
        sampler="beam",
        num_beams=3,
        return_all_beams=True,
        length_penalty=1.0,
        no_repeat_ngram_size=1,
        banned_ids=[target.unk_id],
    )
    got, attention, scores = translate(
        texts,
        model,
        source,
        target,
        max_length=4,
        return_attention=True,
        return_scores=True,
        **options,
    )
    ids, expected_attention, expected_scores = map(
        keras.ops.convert_to_numpy,
        model.generate(source(texts), 4, return_scores=True, **options),
    )
    assert got == [target.decode(row) for row in ids]
    assert len(got) == 2 and all(len(beams) == 3 for beams in got)
    np.testing.assert_array_equal(scores, expected_scores)
    np.testing.assert_array_equal(attention, expected_attention)
    assert all("[UNK]" not in s.split() for beams in got for s in beams)
    one, one_scores = translate(
        "hola casa", model, source, target, 4, return_scores=True, **options
    )
    assert one == got[0]
    np.testing.assert_allclose(one_scores, scores[:1], rtol=1e-6, atol=1e-6)
    empty, empty_attention, empty_scores = translate(
        [],
        model,
        source,
        target,
        max_length=4,
        return_attention=True,
        return_scores=True,
        **options,
    )
    assert empty == []
    assert empty_attention.shape == (0, 3, 4, source.max_length)
    assert empty_scores.shape == (0, 3)


def test_translate_checks_constraints_before_processing_texts():
    model, source, target = _bundle()
    # An empty text would raise the processor's ValueError: the bad
    # constraint is named first.
    with pytest.raises(ValueError, match="translate: `min_length` must be"):
        translate([""], model, source, target, max_length=3, min_length=4)
    with pytest.raises(TypeError, match="translate: `length_penalty` must"):
        translate([""], model, source, target, length_penalty="1")


@pytest.mark.parametrize("sampler", ["greedy", "beam"])
def test_translate_takes_repetition_penalty_and_prefix(sampler):
    """The strings and scores of `generate` with the same options; every
    translation starts with the prefix's words."""
    keras.utils.set_random_seed(2)
    model, source, target = _bundle()
    texts = ["hola casa", "esta en casa"]
    prefix = [target.vocabulary.index("is"), target.vocabulary.index("at")]
    options = dict(sampler=sampler, repetition_penalty=1.7, prefix=prefix)
    if sampler == "beam":
        options.update(num_beams=3)
    got, scores = translate(
        texts, model, source, target, 4, return_scores=True, **options
    )
    ids, _, expected_scores = map(
        keras.ops.convert_to_numpy,
        model.generate(source(texts), 4, return_scores=True, **options),
    )
    assert got == [target.decode(row) for row in ids]
    assert all(s.split()[:2] == ["is", "at"] for s in got)
    np.testing.assert_array_equal(scores, expected_scores)
    with pytest.raises(ValueError, match=r"translate: `prefix` must hold"):
        translate([""], model, source, target, 1, prefix=prefix)
    with pytest.raises(ValueError, match=r"translate: `repetition_penalty`"):
        translate([""], model, source, target, repetition_penalty=0.0)


def test_num_return_sequences_is_the_n_best_of_every_beam():
    """`num_return_sequences` (Hugging Face's name, and the export's) gives
    the n best of `return_all_beams` (keras-hub's), with their scores and
    attention; 1 for greedy decoding, as a beam axis of one; refused with
    `return_all_beams`, or above the number of beams."""
    keras.utils.set_random_seed(3)
    model, source, target = _bundle()
    texts = ["hola casa", "esta en casa", "hola"]
    beam = dict(sampler="beam", num_beams=3, length_penalty=1.0)
    every, every_attention, every_scores = translate(
        texts,
        model,
        source,
        target,
        4,
        return_attention=True,
        return_scores=True,
        return_all_beams=True,
        **beam,
    )
    two, attention, scores = translate(
        texts,
        model,
        source,
        target,
        4,
        return_attention=True,
        return_scores=True,
        num_return_sequences=2,
        **beam,
    )
    assert two == [beams[:2] for beams in every]
    np.testing.assert_array_equal(scores, every_scores[:, :2])
    np.testing.assert_array_equal(attention, every_attention[:, :2])
    assert (
        translate(
            "hola", model, source, target, 4, num_return_sequences=2, **beam
        )
        == every[2][:2]
    )
    # Greedy: the one best, as a list of one.
    greedy, greedy_scores = translate(
        texts, model, source, target, 4, return_scores=True
    )
    one, one_scores = translate(
        texts,
        model,
        source,
        target,
        4,
        return_scores=True,
        num_return_sequences=1,
    )
    assert one == [[text] for text in greedy]
    np.testing.assert_array_equal(one_scores, greedy_scores[:, None])
    empty = translate(
        [],
        model,
        source,
        target,
        4,
        return_scores=True,
        num_return_sequences=2,
        **beam,
    )
    assert empty[0] == [] and empty[1].shape == (0, 2)
    with pytest.raises(ValueError) as caught:
        translate(texts, model, source, target, 4, num_return_sequences=2)
    assert str(caught.value) == (
        "translate: `num_return_sequences` must be an integer in [1, 1]; "
        "got 2 (int)."
    )
    with pytest.raises(ValueError) as caught:
        translate(
            texts,
            model,
            source,
            target,
            4,
            num_return_sequences=2,
            return_all_beams=True,
            **beam,
        )
    assert str(caught.value) == (
        "translate: pass `num_return_sequences` (the n best) or "
        "`return_all_beams` (every beam), not both; got "
        "num_return_sequences=2 and return_all_beams=True."
    )
