"""The text pipeline: standardisation, vocabulary, ids <-> strings."""

import numpy as np
import pytest

from kmodels.seq2seq.text_processor import TextProcessor


def _processor(**kwargs):
    p = TextProcessor(**kwargs)
    # Counts: "." 3, "casa" 2, "en" 2, "esta" 2, "hola" 1 (ties sorted).
    p.adapt(["Hola.", "Está en casa.", "¿Está en casa?."])
    return p


def test_standardize_matches_the_tutorial():
    # The tutorial's documented output for its example sentence
    # (tf_lower_and_split_punct), with its double spaces collapsed.
    p = TextProcessor()
    assert (
        p.standardize("¿Todavía está en casa?")
        == "[START] ¿ todavia esta en casa ? [END]"
    )
    # Digits and characters outside [a-z.?!,¿] are dropped, as there.
    assert p.standardize(["Él tiene 2 gatos; ¡sí!"]) == [
        "[START] el tiene gatos si ! [END]"
    ]


def test_standardize_whitespace_and_digits():
    # Tabs and newlines separate words (the tutorial glued them).
    p = TextProcessor(punctuation=".,/-", keep_digits=True)
    assert p.standardize("March\t3,\n2021") == "[START] march 3 , 2021 [END]"
    assert (
        p.standardize("03/03/21 or 2021-03-03")
        == "[START] 03 / 03 / 21 or 2021 - 03 - 03 [END]"
    )


def test_split_digits_separates_numbers_from_letters():
    p = TextProcessor(keep_digits=True, split_digits=True)
    assert p.standardize("The 21st of May, 2nd ed.") == (
        "[START] the 21 st of may , 2 nd ed . [END]"
    )
    # Off by default (the tutorial's behaviour with digits kept).
    q = TextProcessor(keep_digits=True)
    assert q.standardize("The 21st") == "[START] the 21st [END]"


def test_vocabulary_order_and_reserved_ids():
    p = _processor()
    assert p.vocabulary == [
        "",
        "[UNK]",
        "[START]",
        "[END]",
        ".",
        "casa",
        "en",
        "esta",
        "?",
        "hola",
        "¿",
    ]
    assert (p.pad_id, p.unk_id, p.start_id, p.end_id) == (0, 1, 2, 3)
    assert p.vocabulary_size == 11


def test_adapt_max_tokens_maps_rare_words_to_unk():
    p = TextProcessor(max_length=6)
    p.adapt(["Hola.", "Está en casa.", "¿Está en casa?."], max_tokens=6)
    assert p.vocabulary == ["", "[UNK]", "[START]", "[END]", ".", "casa"]
    np.testing.assert_array_equal(p("hola casa"), [[2, 1, 5, 3, 0, 0]])


def test_ids_padding_unknown_words():
    p = _processor(max_length=8)
    ids = p(["está en casa", "Hola, gato."])
    assert ids.dtype == np.int32
    # "," is a token (tutorial's set) but not in the vocabulary: [UNK] (1),
    # like "gato".
    np.testing.assert_array_equal(
        ids, [[2, 7, 6, 5, 3, 0, 0, 0], [2, 9, 1, 1, 4, 3, 0, 0]]
    )


def test_round_trip_ids_to_strings():
    p = _processor(max_length=8)
    texts = ["Está en casa.", "¿hola?"]
    ids = p(texts)
    assert p.decode(ids) == ["esta en casa .", "¿ hola ?"]
    # Generation output: no [START], [END] then 0-padding; a single row
    # gives a str; `separator` joins the tokens.
    assert p.decode([5, 6, 3, 0]) == "casa en"
    assert p.decode([[5, 6, 3, 7]], separator="") == ["casaen"]
    # Only a leading [START] is a marker; padding also ends a row.
    assert p.decode([[2, 5, 2, 6, 0, 7]]) == ["casa [START] en"]
    np.testing.assert_array_equal(
        p.tokens(ids[1]),
        ["[START]", "¿", "hola", "?", "[END]", "", "", ""],
    )


def test_long_texts_are_truncated_and_keep_end():
    p = _processor(max_length=5)
    ids = p(["casa en casa en casa en casa", "esta en casa"])
    # max_length counts the markers: 3 words kept, [END] still closes.
    np.testing.assert_array_equal(ids, [[2, 5, 6, 5, 3], [2, 7, 6, 5, 3]])
    assert p.tokenize("casa en casa en") == [
        "[START]",
        "casa",
        "en",
        "casa",
        "[END]",
    ]


def test_empty_text_raises():
    p = _processor()
    for text in ["", "   ", "\t\n", "日本", "@#$"]:
        with pytest.raises(ValueError, match=r"empty text at index 1"):
            p(["hola", text])
        # Standardising an empty text is well defined: markers only.
        assert p.standardize(text) == "[START] [END]"
    # adapt skips empty texts.
    q = TextProcessor()
    q.adapt(["hola", "", "日本"])
    assert q.vocabulary == ["", "[UNK]", "[START]", "[END]", "hola"]


def test_empty_batch_gives_empty_ids():
    p = _processor(max_length=4)
    assert p([]).shape == (0, 4)


def test_out_of_range_ids_raise():
    p = _processor()
    with pytest.raises(ValueError, match=r"must be in \[0, 11\).*e\.g\. 11"):
        p.decode([[2, 11, 3]])
    with pytest.raises(ValueError, match=r"must be in \[0, 11\).*e\.g\. -1"):
        p.tokens([-1])
    with pytest.raises(ValueError, match="must be integers; got dtype float"):
        p.decode([[2.0, 3.0]])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="no vocabulary yet"):
        TextProcessor()("hola")
    with pytest.raises(ValueError, match=r"integer >= 3; got 2 \(int\)"):
        TextProcessor(max_length=2)
    with pytest.raises(ValueError, match="expects strings; item 1 is int"):
        _processor()(["hola", 3])
    with pytest.raises(ValueError, match=r"starts with \['', '\[UNK\]'"):
        TextProcessor(vocabulary=["a", "b"])


def test_config_round_trip():
    p = _processor(max_length=6, punctuation=".-", keep_digits=True)
    q = TextProcessor.from_config(p.get_config())
    assert q.get_config() == p.get_config()
    texts = ["Está en casa 2-3.", "hola"]
    np.testing.assert_array_equal(q(texts), p(texts))


def test_word_level_is_the_default_tokenizer():
    p = _processor()
    assert p.tokenizer == "word"
    assert p.get_config()["tokenizer"] == "word"
    # A config saved before the `tokenizer` option loads as word level.
    config = p.get_config()
    del config["tokenizer"]
    q = TextProcessor.from_config(config)
    assert q.tokenizer == "word"
    np.testing.assert_array_equal(
        q("esta en casa"), [[2, 7, 6, 5, 3] + [0] * 59]
    )
