"""Subword text: `TextProcessor(tokenizer="wordpiece")` (keras-hub's
WordPiece) keeps words the vocabulary never saw, where words give [UNK]."""

import contextlib
import itertools
import json

import keras
import numpy as np
import pytest

from backends_tests import tensorflow_only
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_acc
from kmodels.seq2seq import masked_loss
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.text_translator import translate

CORPUS = ["I was walking and talking.", "They walked, we talked!"] * 10
# The characters of CORPUS: "!", ",", ".", then a d e g h i k l n s t w y.
ALPHABET = list("!,.adeghiklnstwy")


def _pieces(max_tokens=60):
    p = TextProcessor(max_length=32, tokenizer="wordpiece")
    p.adapt(CORPUS, max_tokens=max_tokens)
    return p


def _hand_made(max_length=6):
    """A processor with a vocabulary written here, so ids are known."""
    vocabulary = ["", "[UNK]", "[START]", "[END]"]
    vocabulary += ["cat", "##s", "a", "##t", "dog", "."]
    return TextProcessor(
        max_length=max_length, tokenizer="wordpiece", vocabulary=vocabulary
    )


def test_vocabulary_holds_every_character_alone_and_continued():
    p = _pieces()
    assert p.tokenizer == "wordpiece"
    vocabulary = p.vocabulary
    assert vocabulary[:4] == ["", "[UNK]", "[START]", "[END]"]
    # The trainer lists the single characters first (sorted); the words
    # it learned (each seen 10 times) and the "##" continuations follow.
    assert vocabulary[4:20] == ALPHABET
    rest = set(vocabulary[20:])
    assert {"##" + c for c in ALPHABET} <= rest
    assert {"walking", "talked", "they"} <= rest
    assert len(vocabulary) == len(set(vocabulary)) <= 60
    # Without a cap: at most the word vocabulary's size (4 + 12 words),
    # raised to the room every character needs (4 + 2 * 16): characters
    # only.
    q = _pieces(max_tokens=None)
    assert q.vocabulary_size == 36
    assert set(q.vocabulary[4:]) == {
        *ALPHABET,
        *("##" + c for c in ALPHABET),
    }


def test_round_trip_in_and_out_of_vocabulary():
    p = _pieces()
    texts = [
        "We walked and talked.",  # every word seen
        "Dante stalks the SWAN!",  # no word seen, every character seen
        "Él está en la sala, ¿y tú?",  # accents, case, unseen words
    ]
    # The standardised texts, written out by hand (NFKD then dropping
    # the accents leaves "el esta en la sala").
    standardised = [
        "we walked and talked .",
        "dante stalks the swan !",
        "el esta en la sala , ¿ y tu ?",
    ]
    assert p.standardize(texts) == [f"[START] {s} [END]" for s in standardised]
    # "¿", "?" and the "u" of "tu" were never seen: [UNK] (a word with an
    # unseen character is [UNK] as a whole, as in WordPiece).
    assert p.decode(p(texts)) == [
        standardised[0],
        standardised[1],
        "el esta en la sala , [UNK] y [UNK] [UNK]",
    ]
    # Greedy longest match: a learned word is one piece, an unseen one is
    # spelled with characters.
    assert p.tokenize("Dante walked") == [
        "[START]",
        "d",
        "##a",
        "##n",
        "##t",
        "##e",
        "walked",
        "[END]",
    ]
    ids = p("Dante walked")
    assert ids.shape == (1, 32) and ids.dtype == np.int32
    expected = [p.vocabulary.index(t) for t in p.tokenize("Dante walked")]
    np.testing.assert_array_equal(ids[0, :8], expected)
    np.testing.assert_array_equal(ids[0, 8:], 0)
    # The word-level processor of the same corpus: "dante" is [UNK].
    w = TextProcessor(max_length=16)
    w.adapt(CORPUS)
    assert w.decode(w("Dante walked")[0]) == "[UNK] walked"
    assert w("Dante walked")[0, 1] == w.unk_id == 1


def test_ids_decode_and_truncation_with_a_known_vocabulary():
    p = _hand_made()
    # cat ##s | dog | [UNK] (no "o", "w") | . -> ids by position above.
    np.testing.assert_array_equal(
        p(["Cats dog.", "cow", "at"]),
        [[2, 4, 5, 8, 9, 3], [2, 1, 3, 0, 0, 0], [2, 6, 7, 3, 0, 0]],
    )
    assert p.decode([[2, 4, 5, 8, 9, 3]]) == ["cats dog ."]
    assert p.decode([4, 5, 8, 3], separator="_") == "cats_dog"
    # A continuation with nothing before it stays as it is (as keras-hub's
    # detokenize); [END] and padding end a row.
    assert p.decode([[5, 4, 5, 3, 8], [6, 7, 7, 0, 4]]) == [
        "##s cats",
        "att",
    ]
    np.testing.assert_array_equal(
        p.tokens([2, 4, 5, 3]), ["[START]", "cat", "##s", "[END]"]
    )
    # max_length counts tokens (pieces): 4 kept, the last word cut.
    q = _hand_made(max_length=5)
    assert q.tokenize("dog cats") == ["[START]", "dog", "cat", "##s", "[END]"]
    assert q.tokenize("cats cats") == [
        "[START]",
        "cat",
        "##s",
        "cat",
        "[END]",
    ]
    np.testing.assert_array_equal(q("cats cats"), [[2, 4, 5, 4, 3]])


def test_config_round_trip_gives_identical_ids():
    p = _pieces()
    # Through JSON, as TextTranslator.save writes text.json.
    config = json.loads(json.dumps(p.get_config()))
    assert config["tokenizer"] == "wordpiece"
    q = TextProcessor.from_config(config)
    assert q.get_config() == p.get_config()
    assert q.vocabulary == p.vocabulary
    texts = ["Dante stalks the swan!", "They walked, we talked!"]
    np.testing.assert_array_equal(q(texts), p(texts))
    assert q.decode(q(texts)) == p.decode(p(texts))


def test_bad_input_raises():
    with pytest.raises(
        ValueError,
        match=r"`tokenizer` must be one of \['word', 'wordpiece'\]; "
        r"got 'bpe' \(str\)",
    ):
        TextProcessor(tokenizer="bpe")
    with pytest.raises(ValueError, match=r"got None \(NoneType\)"):
        TextProcessor(tokenizer=None)
    with pytest.raises(ValueError, match="no vocabulary yet"):
        TextProcessor(tokenizer="wordpiece")("hola")
    with pytest.raises(ValueError, match="no vocabulary yet"):
        TextProcessor(tokenizer="wordpiece").tokenize("hola")
    # 4 reserved + 2 x 16 characters.
    with pytest.raises(
        ValueError,
        match=r"`max_tokens` must be at least 36 with subwords .*16 "
        r"characters seen.*got 35",
    ):
        TextProcessor(tokenizer="wordpiece").adapt(CORPUS, max_tokens=35)
    with pytest.raises(ValueError, match="found no word"):
        TextProcessor(tokenizer="wordpiece").adapt(["", "日本"])
    p = _hand_made()
    # The same errors as the word-level processor.
    with pytest.raises(ValueError, match=r"empty text at index 1"):
        p(["cat", "日本"])
    with pytest.raises(ValueError, match="expects strings; item 1 is int"):
        p(["cat", 3])
    with pytest.raises(ValueError, match=r"must be in \[0, 10\).*e\.g\. 10"):
        p.decode([[2, 10, 3]])
    assert p([]).shape == (0, 6)
    assert p.decode(p([b"cats"])) == ["cats"]


@contextlib.contextmanager
def _one_torch_thread():
    """torch's default intra-op threads spin on a busy machine (about 8x
    slower here, see docs/seq2seq.md); other backends are left alone."""
    if keras.backend.backend() != "torch":
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# Words of 2 or 3 letters over "abcd"; six of them never in training.
COPY_WORDS = [
    "".join(w) for n in (2, 3) for w in itertools.product("abcd", repeat=n)
]
UNSEEN = ["dab", "cad", "bcd", "ac", "dc", "abc"]


@pytest.fixture(scope="module")
def copy_bundle():
    """A subword copy model trained on this backend, as a bundle."""
    train = [w for w in COPY_WORDS if w not in UNSEEN]
    texts = list(np.random.default_rng(0).choice(train, size=256))
    p = TextProcessor(max_length=6, tokenizer="wordpiece")
    # 4 reserved + 4 letters + 4 continuations: character pieces only.
    p.adapt(train, max_tokens=12)
    keras.utils.set_random_seed(0)
    x = p(texts)
    model = Translator(p.vocabulary_size, p.vocabulary_size, 16)
    model.compile(
        keras.optimizers.Adam(0.03), loss=masked_loss, metrics=[masked_acc]
    )
    with _one_torch_thread():
        model.fit((x, x[:, :-1]), x[:, 1:], epochs=30, batch_size=64, verbose=0)
    return TextTranslator(model, p, p), train


@pytest.mark.slow(reason="trains a subword translator to spell (20-25 s)")
def test_copy_task_brings_unseen_words_back(copy_bundle, tmp_path):
    bundle, train = copy_bundle
    model, p = bundle.translator, bundle.context_processor
    unseen = UNSEEN
    assert set(p.vocabulary[4:]) == {*"abcd", "##a", "##b", "##c", "##d"}
    # The word-level processor of the same training words: [UNK].
    w = TextProcessor(max_length=6)
    w.adapt(train)
    np.testing.assert_array_equal(w(unseen)[:, 1], 1)
    assert w.decode(w(unseen)) == ["[UNK]"] * 6
    # Subwords: known pieces, decoded back.
    assert p.decode(p(unseen)) == unseen
    with _one_torch_thread():
        # Copied exactly (20 epochs sufficed on every backend and on four
        # seeds on torch).
        assert translate(unseen, model, p, p) == unseen
        # The same batch shape: no second compilation of the loop.
        assert bundle.translate(unseen[::-1]) == unseen[::-1]
    # The bundle keeps its subword processors (text.json) through
    # save/load.
    bundle.save(tmp_path / "bundle")
    with open(tmp_path / "bundle" / "text.json") as f:
        saved = json.load(f)
    assert saved["context_processor"]["tokenizer"] == "wordpiece"
    loaded = TextTranslator.load(tmp_path / "bundle")
    for q in (loaded.context_processor, loaded.target_processor):
        assert q.tokenizer == "wordpiece"
        assert q.vocabulary == p.vocabulary
        np.testing.assert_array_equal(q(unseen), p(unseen))


# Runs in the TensorFlow-only process where Keras, kmodels, keras-hub,
# tensorflow_text, JAX and torch cannot be imported: TensorFlow alone
# serves the SavedModel's `translate` and `tokenize`.
_SERVE = r"""
import json
import sys

BLOCKED = ("keras", "kmodels", "keras_hub", "tf_keras", "tensorflow_text",
           "jax", "torch")
for name in BLOCKED:
    sys.modules[name] = None
import tensorflow as tf

path, texts = json.load(sys.stdin)
served = tf.saved_model.load(path)
texts = tf.constant(texts, tf.string)
print(json.dumps({
    "translate": [s.decode() for s in served.translate(texts).numpy()],
    "tokenize": served.tokenize(texts).numpy().tolist(),
    "imported": sorted(
        m for m in sys.modules
        if m.split(".")[0] in BLOCKED and sys.modules[m] is not None
    ),
}))
"""
# Inputs for the exported copy model: the unseen words (copied), then case,
# accents, punctuation (no piece: [UNK]), a truncated text, a word of 100
# bytes (spelled, truncated) and one of 101 (too long: [UNK]), an unknown
# letter, and texts with no word ("" in the export, an error in Python).
EXPORT_TEXTS = [
    *UNSEEN,
    "DAB Cad",
    "Ábç, dç?",
    "a bc d ab",
    "abcd" * 25,
    "abcd" * 25 + "a",
    "abe",
]
NO_WORD = ["", "  ", "日本"]


@pytest.mark.slow(reason="exports and serves in a TensorFlow process (20-23 s)")
@pytest.mark.cross_backend(
    reason="the export loads the .keras file this backend saved in a "
    "TensorFlow subprocess: torch's file against TensorFlow's SavedModel"
)
def test_export_spells_unseen_words_with_tensorflow_alone(
    copy_bundle, tmp_path
):
    bundle = copy_bundle[0]
    p = bundle.context_processor
    path = str(tmp_path / "copy")
    bundle.export(path)
    served = tensorflow_only.run(_SERVE, [path, EXPORT_TEXTS + NO_WORD])
    assert served["imported"] == []
    # The WordPiece ids of keras-hub (the processor's), byte for byte.
    ids = served["tokenize"]
    assert ids[: len(EXPORT_TEXTS)] == p(EXPORT_TEXTS).tolist()
    assert ids[len(EXPORT_TEXTS) :] == [[2, 3, 0, 0, 0, 0]] * len(NO_WORD)
    # Spot checks of the cases: 100 bytes spelled, 101 bytes and a word
    # with an unknown letter [UNK] as a whole.
    tokens = p.tokens(ids[len(UNSEEN) :]).tolist()
    assert tokens[3][:5] == ["[START]", "a", "##b", "##c", "##d"]
    assert tokens[4][:3] == tokens[5][:3] == ["[START]", "[UNK]", "[END]"]
    # The same strings as `translate` (greedy); the unseen words copied.
    got = served["translate"]
    with _one_torch_thread():
        # Batches of 6, the shape the loop was compiled for.
        expected = sum(
            (
                bundle.translate(EXPORT_TEXTS[i : i + 6])
                for i in range(0, len(EXPORT_TEXTS), 6)
            ),
            [],
        )
    assert got[: len(EXPORT_TEXTS)] == expected
    assert got[: len(UNSEEN)] == UNSEEN
    assert got[len(EXPORT_TEXTS) :] == [""] * len(NO_WORD)
