"""`TextProcessor(standardize="unicode")`: real text keeps its case,
accents, punctuation, placeholders, markup and spacing, through ids and
back, on every backend; the tutorial's rules stay the default."""

import re
import unicodedata

import keras
import numpy as np
import pytest

from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import TextTranslator
from kmodels.seq2seq import Translator
from kmodels.testing.exports import tiny_bundle

# UI strings as Django's catalogues hold them (English and Spanish), and
# spacing, scripts and forms the rules must keep.
TEXTS = [
    'Are you sure you want to delete %(object_name)s "%(escaped_object)s"?',
    "Ensure this value has at most %(limit_value)d characters "
    "(it has %(show_value)d).",
    "¿Está seguro de que quiere borrar el %(object_name)s "
    "«%(escaped_object)s»?",
    'Go to <a href="{url}">the admin</a> &amp; log in, {0}!',
    "Contraseña: %s. Último acceso: 3 días; 50%% completado…",
    "Ünïcödé  text\twith\n runs   of spaces ",
    "C# and x++,(a)[b] -- don't stop",
    "日本語のテキスト。",
    # Decomposed accents (NFD) come back composed (NFC).
    "cafe\u0301 y nin\u0303o",
]


def expected(text):
    """What decoding gives back: the NFC text, each run of whitespace one
    space, the ends stripped (computed without the tokenizer)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


@pytest.fixture(scope="module")
def processor():
    p = TextProcessor(max_length=48, standardize="unicode")
    p.adapt(TEXTS)
    return p


def test_round_trip_keeps_case_accents_placeholders_and_spacing(processor):
    ids = processor(TEXTS)
    # The ids as a backend tensor, as a model's output would come.
    decoded = processor.decode(keras.ops.convert_to_tensor(ids))
    assert decoded == [expected(t) for t in TEXTS]
    assert processor.decode(ids[4]) == (
        "Contraseña: %s. Último acceso: 3 días; 50%% completado…"
    )
    # Nothing maps to [UNK] on the texts it learned from.
    assert not np.any(ids == processor.unk_id)


def test_tokens_of_placeholders_markup_and_punctuation(processor):
    assert processor.tokenize(TEXTS[0])[1:-1] == [
        "Are", "you", "sure", "you", "want", "to", "delete",
        "%(object_name)s", '"', "[JOIN]", "%(escaped_object)s", "[JOIN]",
        '"', "?",
    ]  # fmt: skip
    assert processor.tokenize(TEXTS[3])[1:-1] == [
        "Go", "to", '<a href="{url}">', "[JOIN]", "the", "admin", "[JOIN]",
        "</a>", "&amp;", "log", "in", ",", "{0}", "!",
    ]  # fmt: skip
    # "(" takes no space after it by default, "," none before it: the
    # text's "x++,(a)" needs one [JOIN] per pair written together where
    # the rule puts a space, and "[b]" after ")" likewise.
    assert processor.tokenize("x++,(a)[b]")[1:-1] == [
        "x", "[JOIN]", "+", "[JOIN]", "+", ",", "[JOIN]", "(", "a", ")",
        "[JOIN]", "[", "b", "]",
    ]  # fmt: skip
    # A space where the rule puts none: [SPACE].
    assert processor.tokenize("wait !")[1:-1] == ["wait", "[SPACE]", "!"]
    # The markers are in every vocabulary adapt learns, seen or not.
    p = TextProcessor(standardize="unicode")
    p.adapt(["wait"])
    assert p.vocabulary[4:6] == ["[JOIN]", "[SPACE]"]
    assert p.decode(p(["wait !"]))[0] == "wait [UNK]"
    # An unknown "!" reads [UNK], spaced as a word.
    assert p.decode(p(["wait wait!"]))[0] == "wait wait [UNK]"


def test_each_default_placeholder_is_one_token():
    p = TextProcessor(standardize="unicode")
    for placeholder in (
        "%(name)s",
        "%s",
        "%d",
        "%.2f",
        "%%",
        "{name}",
        "{0}",
        "{}",
        "<br/>",
        '<a href="https://x.org/?a=1&b=2">',
        "</b>",
        "&amp;",
        "&#39;",
        "&#x27;",
    ):
        assert p.tokenize(f"a {placeholder} b")[1:-1] == [
            "a",
            placeholder,
            "b",
        ]


def test_own_placeholders_and_none():
    p = TextProcessor(standardize="unicode", placeholders=[r"\[\[\w+\]\]"])
    assert p.tokenize("Hi [[user]]!")[1:-1] == ["Hi", "[[user]]", "!"]
    # Only the given patterns: %s is now two tokens written together.
    assert p.tokenize("%s")[1:-1] == ["%", "[JOIN]", "s"]
    bare = TextProcessor(standardize="unicode", placeholders=())
    assert bare.tokenize("<b>")[1:-1] == ["<", "[JOIN]", "b", "[JOIN]", ">"]


def test_tutorial_rules_stay_the_default_and_old_configs_load():
    config = TextProcessor(max_length=8).get_config()
    assert (config["standardize"], config["placeholders"]) == (
        "tutorial",
        None,
    )
    # A config saved before these options existed.
    del config["standardize"], config["placeholders"]
    old = TextProcessor.from_config(config)
    assert old.standardize("¿Todavía está en <b>casa</b>?") == (
        "[START] ¿ todavia esta en bcasab ? [END]"
    )


def test_config_round_trip_keeps_the_patterns(processor):
    config = processor.get_config()
    assert config["standardize"] == "unicode"
    assert len(config["placeholders"]) == 4
    again = TextProcessor.from_config(config)
    np.testing.assert_array_equal(again(TEXTS), processor(TEXTS))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(standardize="nfc"), "`standardize` must be one of"),
        (
            dict(standardize="unicode", tokenizer="wordpiece"),
            "with tokenizer='word'; got tokenizer='wordpiece'",
        ),
        (
            dict(standardize="unicode", keep_digits=True),
            "with keep_digits=False; got keep_digits=True",
        ),
        (
            dict(standardize="unicode", punctuation="."),
            "with punctuation='.?!,¿'; got punctuation='.'",
        ),
        (
            dict(placeholders=[r"%s"]),
            "with standardize='tutorial'",
        ),
        (
            dict(standardize="unicode", placeholders=r"%s"),
            "must be a list of regular expressions",
        ),
        (
            dict(standardize="unicode", placeholders=["(unclosed"]),
            "got '(unclosed', which does not compile",
        ),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TextProcessor(**kwargs)


def test_decode_keeps_the_texts_spacing_only(processor):
    with pytest.raises(ValueError, match="`separator` must be ' '; got ''"):
        processor.decode(processor(["hola"]), separator="")


def test_the_saved_model_export_refuses_unicode_processors(tmp_path):
    bundle = tiny_bundle(built=True)
    bundle.target_processor = TextProcessor(
        max_length=5,
        standardize="unicode",
        vocabulary=bundle.target_processor.vocabulary,
    )
    path = tmp_path / "export"
    with pytest.raises(ValueError, match="target TextProcessor's settings"):
        bundle.export(path)
    assert not path.exists()


def masking_processors():
    """A source and a target processor that mask placeholders, adapted on
    one pair."""
    source = TextProcessor(
        max_length=12, standardize="unicode", mask_placeholders=True
    )
    target = TextProcessor(
        max_length=12, standardize="unicode", mask_placeholders=True
    )
    source.adapt(["Delete %(name)s from %(list)s?"])
    target.adapt(["¿Borrar %(name)s de %(list)s?"])
    return source, target


def test_masked_placeholders_are_numbered_by_the_source():
    source, target = masking_processors()
    # The slots and spacing markers follow the reserved tokens.
    assert source.vocabulary[4:14] == [
        "[JOIN]", "[SPACE]", "[PH1]", "[PH2]", "[PH3]", "[PH4]", "[PH5]",
        "[PH6]", "[PH7]", "[PH8]",
    ]  # fmt: skip
    text = "Move <b>%(a)s</b> to %(b)s, %(a)s"
    assert source.placeholders_in(text) == ["<b>", "%(a)s", "</b>", "%(b)s"]
    assert source.tokenize(text)[1:-1] == [
        "Move", "[PH1]", "[JOIN]", "[PH2]", "[JOIN]", "[PH3]", "to",
        "[PH4]", ",", "[PH2]",
    ]  # fmt: skip
    # The translation's own order differs: numbered by the source's list;
    # a placeholder the source lacks ({n}) stays whole.
    known = ["%(a)s", "%(b)s"]
    assert target.tokenize("Mover %(b)s a %(a)s {n}", known)[1:-1] == [
        "Mover", "[PH2]", "a", "[PH1]", "{n}",
    ]  # fmt: skip
    ids = target(["%(b)s de %(a)s"], [known])
    assert target.decode(ids, placeholders=[known]) == ["%(b)s de %(a)s"]
    assert target.decode(ids[0], placeholders=known) == "%(b)s de %(a)s"
    # Unfilled slots stay visible.
    assert target.decode(ids) == ["[PH2] de [PH1]"]


def test_more_than_eight_placeholders_keep_the_rest_whole():
    source, _ = masking_processors()
    text = " ".join(f"{{{k}}}" for k in range(10))
    assert source.tokenize(text)[1:-1][7:] == ["[PH8]", "{8}", "{9}"]


def test_translate_copies_unseen_placeholders_from_the_source():
    source, target = masking_processors()
    keras.utils.set_random_seed(0)
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        4,
        start_id=target.start_id,
        end_id=target.end_id,
    )
    model((np.array([[2, 4, 3]]), np.array([[2, 4, 3]])))
    bundle = TextTranslator(model, source, target)
    v = target.vocabulary
    # The output forced to "[PH2] [JOIN] [PH1]": the source's placeholders,
    # never seen in training, come back in the target's order.
    out = bundle.translate(
        ["Move %(x)s to {y}", "<i>%d</i>"],
        prefix=[v.index("[PH2]"), v.index("[JOIN]"), v.index("[PH1]")],
        max_length=3,
    )
    assert out == ["{y}%(x)s", "%d<i>"]


def test_processors_must_agree_on_masking():
    source, _ = masking_processors()
    plain = TextProcessor(max_length=12, standardize="unicode")
    plain.adapt(["¿Borrar %(name)s de %(list)s?"])
    model = Translator(
        source.vocabulary_size, plain.vocabulary_size, 4, start_id=2, end_id=3
    )
    with pytest.raises(ValueError, match="must both mask placeholders"):
        TextTranslator(model, source, plain).translate("Delete %s")
    with pytest.raises(ValueError, match="needs standardize='unicode'"):
        TextProcessor(mask_placeholders=True)
    # One list of str per text (or row), the same error on every backend.
    for bad in ([["%s"]], "ab", [[1], [2]]):
        with pytest.raises(ValueError, match="one list of str per text"):
            source(["a", "b"], bad)
    ids = source(["a", "b"])
    with pytest.raises(ValueError, match=r"per text .*, 2 here; got \[\[\]\]"):
        source.decode(keras.ops.convert_to_tensor(ids), placeholders=[[]])
    with pytest.raises(ValueError, match="one list of str per text"):
        source.decode(ids[0], placeholders="%s")


def test_the_keras_hub_preprocessor_numbers_targets_by_their_sources():
    from kmodels.seq2seq import TranslatorSeq2SeqLMPreprocessor

    source, target = masking_processors()
    pre = TranslatorSeq2SeqLMPreprocessor(source, target)
    x, y, _ = pre(
        {
            "encoder_text": ["Copy %(a)s to %(b)s"],
            "decoder_text": ["Copiar a %(b)s %(a)s"],
        }
    )
    # y is the decoder input shifted by one: "Copiar" is unknown ([UNK]),
    # "a" too; then the source's second and first placeholders.
    tokens = target.tokens(y[0])[:5].tolist()
    assert tokens == ["[UNK]", "[UNK]", "[PH2]", "[PH1]", "[END]"]
    assert source.tokens(x["encoder_token_ids"][0])[:6].tolist() == [
        "[START]", "[UNK]", "[PH1]", "[UNK]", "[PH2]", "[END]",
    ]  # fmt: skip
