"""`TextProcessor(standardize="unicode")`: real text keeps its case,
accents, punctuation, placeholders, markup and spacing, through ids and
back, on every backend; the tutorial's rules stay the default."""

import re
import unicodedata

import keras
import numpy as np
import pytest

from kmodels.seq2seq import TextProcessor
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
