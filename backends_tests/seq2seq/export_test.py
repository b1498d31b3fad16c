"""Exports: `TextTranslator.export` (a SavedModel that TensorFlow alone
serves) and `Translator.export` (Keras' formats, the logits model).

The round trip trains a small date translator on the running backend,
exports it (a TensorFlow subprocess), then serves it from a TensorFlow-only
Python process (`backends_tests/tensorflow_only.py`, one per test session)
in which Keras and kmodels cannot be imported (an import hook
refuses them: `import tensorflow` itself imports Keras when it is
installed, so only a refusal proves that the SavedModel does not need it), and
compares its strings with `TextTranslator.translate` on the 500 held-out
dates of `kmodels.datasets.dates` and on edge cases. The subword
(WordPiece) text ends of the export are compared with keras-hub's here;
subword_test.py serves an exported subword bundle.
"""

import keras
import numpy as np
import pytest

from backends_tests import tensorflow_only
from kmodels.contracts.checks import checked
from kmodels.datasets.dates import DATE_TEXT
from kmodels.datasets.dates import date_split
from kmodels.seq2seq.losses import masked_loss
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.translator import Translator
from kmodels.testing.exports import assert_only_a_saved_model

HELD_OUT = 500
# The export serves beam search with constraints (the greedy export is
# served in subword_test.py): 3 beams, the 2 best returned, `[UNK]` (1)
# never produced, no 4-gram repeated (an ISO date repeats none), and a
# length penalty.
SEARCH = dict(
    sampler="beam",
    num_beams=3,
    length_penalty=1.0,
    no_repeat_ngram_size=4,
    banned_ids=[1],
)
# Texts that exercise each step of the standardisation, on the date
# processor (punctuation ".,/-", digits kept and split from letters).
EDGE_CASES = [
    "  March\t3,\n2021  ",  # tab, newline, runs of spaces
    "\u00a0March\u20033, 2021",  # no-break and em spaces
    "Ｍａｒｃｈ ３, ２０２１",  # full-width forms (NFKD)
    "Mäｒz 3rd, 2021",  # an accent (a combining mark, dropped)
    "İSTANBUL ΣΑΣ 3rd4th",  # special lower cases; digits/letters split
    "ﬁrst ½ ① ²",  # ligature, fraction, circled and superscript digits
    "March 3?! 2021 (¿)",  # characters outside the kept set
    "1/2/3/4/5/6/7/8/9/10/11/12",  # punctuation tokens
    "zzunknown March 3, 2021",  # a word outside the vocabulary: [UNK]
    "x",
    "the 3rd of March 2021 " * 4,  # longer than max_length: truncated
    "the 3rd of March 2021",  # ... to this (its first 6 words)
]
# The ISO date an edge case names ("x" when it names none).
EDGE_REFERENCES = ["2021-03-03"] * 4 + ["x", "x", "2021-03-03", "x"]
EDGE_REFERENCES += ["2021-03-03", "x", "2021-03-03", "2021-03-03"]
# No word left after standardisation: `translate` raises, the export
# returns "".
EMPTY = ["", "   ", "日本", "?!"]

# Runs in the TensorFlow-only process: Keras, kmodels and the other
# frameworks cannot be imported (TensorFlow's own `import keras` fails quietly),
# TensorFlow loads the SavedModel and translates.
_SERVE = r"""
import json
import sys

BLOCKED = ("keras", "kmodels", "keras_hub", "tf_keras", "tensorflow_text",
           "jax", "torch")
# `import keras` (or any of these) now raises ImportError.
for name in BLOCKED:
    sys.modules[name] = None
import tensorflow as tf

path, texts = json.load(sys.stdin)
served = tf.saved_model.load(path)
out = served.translate(tf.constant(texts, tf.string))
signature = served.signatures["translate"](tf.constant(texts[:3]))
empty_batch = served.translate(tf.constant([], tf.string))
nbest = served.signatures["nbest"](tf.constant(texts))
print(json.dumps({
    "translations": [s.decode("utf-8") for s in out.numpy().tolist()],
    "nbest": [
        [s.decode("utf-8") for s in row]
        for row in nbest["translations"].numpy().tolist()
    ],
    "nbest_scores": nbest["scores"].numpy().tolist(),
    "signature": [
        s.decode("utf-8") for s in signature["output_0"].numpy().tolist()
    ],
    "empty_batch_shape": list(empty_batch.shape),
    # The best sequence's weights of the first 5 texts and the last one.
    "attention": [
        nbest["attention"].numpy()[i, 0].tolist() for i in [0, 1, 2, 3, 4, -1]
    ],
    "source_ids": nbest["source_ids"].numpy()[:5].tolist(),
    "imported": sorted(
        m for m in sys.modules
        if m.split(".")[0] in BLOCKED and sys.modules[m] is not None
    ),
}))
"""


def _serve(path, texts):
    return tensorflow_only.run(_SERVE, [path, texts])


def _date_translator(train_src, train_tgt, units):
    """Two date processors adapted to the pairs and a `Translator` of
    `units` between them."""
    source = TextProcessor(8, **DATE_TEXT)
    target = TextProcessor(7, **DATE_TEXT)
    source.adapt(train_src)
    target.adapt(train_tgt)
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        units,
        start_id=target.start_id,
        end_id=target.end_id,
    )
    return source, target, model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small date translator trained on this backend, its export, and the
    strings the TensorFlow-only process returned."""
    keras.utils.set_random_seed(0)
    (train_src, train_tgt), (test_src, test_tgt) = date_split(
        2000, HELD_OUT, seed=1
    )
    source, target, model = _date_translator(train_src, train_tgt, 16)
    y = target(train_tgt)
    y_in, y_out = y[:, :-1], y[:, 1:]
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=masked_loss,
    )
    model.fit(
        (source(train_src), y_in), y_out, batch_size=100, epochs=3, verbose=0
    )
    bundle = TextTranslator(model, source, target, separator="")
    path = str(tmp_path_factory.mktemp("export") / "dates")
    bundle.export(path, num_return_sequences=2, **SEARCH)
    texts = test_src + EDGE_CASES + EMPTY
    served = _serve(path, texts)
    return bundle, path, test_src, test_tgt, served


@pytest.mark.slow(reason="exports, serves in a TensorFlow process (20-60 s)")
@pytest.mark.backend_independent(
    reason="the export traces its loop in a TensorFlow subprocess whatever "
    "the backend; the processors on each backend: generate_options_test.py"
)
@pytest.mark.parametrize("sampler", ["greedy", "beam"])
def test_export_serves_repetition_penalty_and_prefix(
    exported, tmp_path, sampler
):
    """The export of `repetition_penalty` and `prefix` (one processor
    class each) serves the strings and scores of `translate` with them."""
    bundle, _, test_src, _, _ = exported
    target = bundle.target_processor
    # Every translation starts with "1999", "-".
    prefix = [target.vocabulary.index("1999"), target.vocabulary.index("-")]
    options = dict(sampler=sampler, repetition_penalty=1.3, prefix=prefix)
    count = 1
    if sampler == "beam":
        options.update(num_beams=3)
        count = 2
    path = str(tmp_path / "dates")
    bundle.export(path, num_return_sequences=count, **options)
    texts = test_src[:40] + EDGE_CASES[:3]
    served = _serve(path, texts)
    if sampler == "beam":
        nbest, scores = bundle.translate(
            texts, return_all_beams=True, return_scores=True, **options
        )
    else:
        best, scores = bundle.translate(texts, return_scores=True, **options)
        nbest, scores = [[s] for s in best], scores[:, None]
    assert served["nbest"] == [beams[:count] for beams in nbest]
    assert served["translations"] == [beams[0] for beams in nbest]
    np.testing.assert_allclose(
        served["nbest_scores"], scores[:, :count], rtol=1e-4, atol=1e-4
    )
    assert all(s.startswith("1999-") for beams in nbest for s in beams)


@pytest.mark.cross_backend(
    reason="the export loads the .keras file this backend saved in a "
    "TensorFlow subprocess and serves it in another: torch's file and "
    "translate against TensorFlow's SavedModel; the refusals run everywhere"
)
@pytest.mark.slow(
    reason="trains, exports, serves in a TensorFlow process (30-45 s)"
)
def test_export_serves_translate_strings_with_tensorflow_alone(exported):
    bundle, path, test_src, test_tgt, served = exported
    assert served["imported"] == []
    got = served["translations"]
    assert len(got) == HELD_OUT + len(EDGE_CASES) + len(EMPTY)
    # The 500 held-out dates and the edge cases: the same strings, the
    # same n-best lists and scores (float32 sums of <= 7 log-probabilities,
    # traced on TensorFlow against this backend's loop: 1e-4).
    nbest, nbest_scores = bundle.translate(
        test_src + EDGE_CASES,
        return_all_beams=True,
        return_scores=True,
        **SEARCH,
    )
    expected = [beams[0] for beams in nbest]
    count = len(test_src + EDGE_CASES)
    assert served["nbest"][:count] == [beams[:2] for beams in nbest]
    np.testing.assert_allclose(
        served["nbest_scores"][:count],
        nbest_scores[:, :2],
        rtol=1e-4,
        atol=1e-4,
    )
    assert np.all(np.isfinite(nbest_scores[:, :2]))
    # The n-best's attention: the best translation's cross-attention, as
    # `translate(..., return_attention=True)` returns it (float32 softmax
    # weights, one loop against another: 1e-5); zeros for a text with no
    # word.
    _, weights = bundle.translate(test_src[:5], return_attention=True, **SEARCH)
    attention = np.array(served["attention"])
    np.testing.assert_allclose(attention[:5], weights, rtol=1e-5, atol=1e-5)
    assert np.all(attention[5] == 0)
    np.testing.assert_array_equal(
        served["source_ids"][:5], bundle.context_processor(test_src[:5])
    )
    # `translate`'s `num_return_sequences` gives the 2 best served.
    assert (
        bundle.translate(test_src[:50], num_return_sequences=2, **SEARCH)
        == served["nbest"][:50]
    )
    assert served["nbest"][count:] == [["", ""]] * len(EMPTY)
    assert np.all(np.array(served["nbest_scores"][count:]) == -np.inf)
    mismatches = [
        (t, e, g)
        for t, e, g in zip(test_src + EDGE_CASES, expected, got)
        if e != g
    ]
    assert mismatches == []
    # Not a degenerate model: the translations differ from one another.
    assert len(set(expected[:HELD_OUT])) > 50
    # The "translate" signature is the same function.
    assert served["signature"] == got[:3]
    assert served["empty_batch_shape"] == [0]
    # Texts with no word: Python refuses them, the export returns "".
    assert got[-len(EMPTY) :] == [""] * len(EMPTY)
    for text in EMPTY:
        with pytest.raises(ValueError, match="empty text at index 0"):
            bundle.translate([text])
    # evaluate() on the same batch (held-out dates, then the edge cases
    # with the ISO date they name, or "x"): exact match counted here.
    references = test_tgt + EDGE_REFERENCES
    scores = bundle.evaluate(
        list(zip(test_src + EDGE_CASES, references)), **SEARCH
    )
    matches = sum(e == r for e, r in zip(expected, references))
    assert scores["exact_match"] == matches / len(references)
    assert scores["count"] == len(references)
    assert 0.0 <= scores["bleu"] <= 1.0
    held_out = np.mean(np.equal(expected, references)[:HELD_OUT])
    print(f"held-out exact match {held_out:.3f}; evaluate: {scores}")


@pytest.mark.cross_backend(
    reason="the export loads the .keras file this backend saved in a "
    "TensorFlow subprocess and serves it in another: torch's file and "
    "translate against TensorFlow's SavedModel; the refusals run everywhere"
)
def test_export_truncates_and_maps_unknown_words_like_the_processor(
    exported,
):
    bundle, _, _, _, served = exported
    source = bundle.context_processor
    got = served["translations"][HELD_OUT:]
    # The edge cases reach the model as these ids (the processor's):
    # an unknown word is [UNK] (1); the long text is cut to its first
    # max_length - 2 = 6 words, the same ids as the short text.
    ids = source(EDGE_CASES)
    assert ids[EDGE_CASES.index("x")].tolist() == [2, 1, 3, 0, 0, 0, 0, 0]
    assert ids[-2].tolist() == ids[-1].tolist()
    assert len(source.standardize(EDGE_CASES[-2]).split()) == 26
    # ... and the export gives them the same translation.
    assert got[-2] == got[-1]


@pytest.mark.cross_backend(
    reason="the export loads the .keras file this backend saved in a "
    "TensorFlow subprocess and serves it in another: torch's file and "
    "translate against TensorFlow's SavedModel; the refusals run everywhere"
)
def test_export_writes_only_what_a_new_export_replaces(exported):
    # What TensorFlow writes is what `SAVED_MODEL` recognises as a previous
    # export (replaced; anything else in the folder is refused, see
    # reliability/export_folder_test.py), and no working folder is left.
    path = exported[1]
    assert_only_a_saved_model(path)


@pytest.fixture(scope="module")
def small_bundle():
    """A built, untrained date translator bundle: what the refusals of
    `export` need, without training or exporting."""
    train_src, train_tgt = date_split(200, 10, seed=1)[0]
    source, target, model = _date_translator(train_src, train_tgt, 4)
    y = target(train_tgt[:2])
    model((source(train_src[:2]), y[:, :-1]))
    return (TextTranslator(model, source, target, separator=""),)


def test_export_refuses_bad_paths_and_unbuilt_models(small_bundle, tmp_path):
    bundle = small_bundle[0]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="expects a folder path"):
        bundle.export(str(tmp_path / "file"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="is not a SavedModel"):
        bundle.export(str(tmp_path / "other"))
    with pytest.raises(ValueError, match="max_length"):
        bundle.export(str(tmp_path / "new"), max_length=0)
    # Search arguments, checked as `Translator.search_step` checks them.
    new = str(tmp_path / "new")
    with pytest.raises(ValueError, match="`sampler` must be 'greedy' or"):
        bundle.export(new, sampler="top_k")
    with pytest.raises(
        ValueError,
        match=r"`num_return_sequences` must be an integer in "
        r"\[1, 3\]; got 4",
    ):
        bundle.export(new, sampler="beam", num_beams=3, num_return_sequences=4)
    with pytest.raises(ValueError, match=r"`num_return_sequences`.*\[1, 1\]"):
        bundle.export(new, num_return_sequences=2)
    with pytest.raises(ValueError, match=r"`min_length` must be <= max_length"):
        bundle.export(new, max_length=3, min_length=4)
    assert not (tmp_path / "new").exists()
    unbuilt = TextTranslator(
        Translator(
            bundle.context_processor.vocabulary_size,
            bundle.target_processor.vocabulary_size,
            4,
        ),
        bundle.context_processor,
        bundle.target_processor,
    )
    with pytest.raises(ValueError, match="has no weights yet"):
        unbuilt.export(str(tmp_path / "new"))


# Subwords: the SavedModel's WordPiece (core TensorFlow ops) against
# keras-hub's Python WordPiece, which `TextProcessor` runs. The export of a
# subword bundle, served with TensorFlow alone, is tested with the copy model
# of subword_test.py.
PIECE_CORPUS = [
    "I was walking and talking.",
    "They walked, we talked!",
    "¿Dónde está? Él está en casa, ¿y tú?",
] * 10
# Greedy longest match first: "abcd" takes "abc", then finds no "##d" and
# is [UNK], although "a ##bcd" would spell it (WordPiece does not go back).
HAND_PIECES = ["", "[UNK]", "[START]", "[END]", "abc", "a", "b", "c", "d"]
HAND_PIECES += ["##bcd", "##b", "##c", "ab", "##ab", "1", "##2", "12", "¿"]
HAND_PIECES += ["-", "##-", "##¿", "ba", "##dab"]


def _random_texts(rng, pieces, count):
    """Texts mixing known pieces (their `##` dropped), case, accents,
    unknown letters, digits, punctuation and whitespace."""
    pieces = [t.removeprefix("##") for t in pieces[4:]]
    extra = ["A", "É", "é", "ç", "x", "3", "?", "!", ",", ".", "-", "¿"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(int(rng.integers(1, 12))):
            if rng.random() < 0.2:
                parts.append(" " if rng.random() < 0.7 else "\t")
            elif rng.random() < 0.8:
                parts.append(str(rng.choice(pieces)))
            else:
                parts.append(str(rng.choice(extra)))
        text = "".join(parts)
        out.append(text.upper() if rng.random() < 0.1 else text)
    return out


@pytest.mark.parametrize("which", ["learned", "hand"])
def test_exported_word_pieces_equal_keras_hub(which):
    import tensorflow as tf

    from kmodels.export import saved_model

    if which == "learned":
        p = TextProcessor(16, tokenizer="wordpiece")
        p.adapt(PIECE_CORPUS, max_tokens=80)
        assert {"walking", "talked", "##a", "¿"} <= set(p.vocabulary)
    else:
        p = TextProcessor(
            12,
            punctuation="?¿-",
            keep_digits=True,
            split_digits=True,
            tokenizer="wordpiece",
            vocabulary=HAND_PIECES,
        )
        assert p.tokenize("abcd abab ba-12") == [
            "[START]",
            *("[UNK]", "ab", "##ab", "ba", "-", "12"),
            "[END]",
        ]
    rng = np.random.default_rng(0)
    texts = _random_texts(rng, p.vocabulary, 300)
    # A word of 100 UTF-8 bytes is spelled, one of 101 is [UNK] ...
    word = "ab" * 50 if which == "hand" else "walking" * 14 + "at"
    texts += [word, word + "c", "ç" * 60, "-" * 30]
    edges = p([word, word + "c"])
    assert edges[0, 1] != p.unk_id
    assert edges[1, :3].tolist() == [p.start_id, p.unk_id, p.end_id]
    # ... because of its length: 99 of its characters are spelled.
    assert p(word[2:] + "c")[0, 1] != p.unk_id
    kept = [t for t in texts if p.standardize(t).count(" ") > 1]
    assert len(kept) > 250
    tokenize, _ = saved_model.tokenizer(p.get_config())
    # Traced (as in the SavedModel) and eager (tf.while_loop runs as a
    # Python loop): the same ids as keras-hub's, byte for byte.
    traced = tf.function(lambda t: tokenize(t)[0], autograph=False)
    expected = p(kept)
    np.testing.assert_array_equal(traced(tf.constant(kept)).numpy(), expected)
    ids, empty = tokenize(tf.constant(kept[:50] + ["", "日本"]))
    np.testing.assert_array_equal(ids.numpy()[:50], expected[:50])
    assert ids.numpy()[50:, :3].tolist() == [[2, 3, 0], [2, 3, 0]]
    assert empty.numpy().tolist() == [False] * 50 + [True, True]
    # Some texts hit [UNK], some are truncated, many use long pieces.
    assert (expected == p.unk_id).any(axis=1).mean() > 0.05
    assert (expected[:, -1] == p.end_id).mean() > 0.02
    long = [
        i
        for i, t in enumerate(p.vocabulary)
        if i >= 4 and len(t.removeprefix("##")) > 1
    ]
    assert np.isin(expected, long).any(axis=1).mean() > 0.3
    # Detokenisation: random ids (specials included) as `decode`.
    rows = rng.integers(4, p.vocabulary_size, size=(400, 10))
    specials = rng.integers(0, 4, size=rows.shape)
    rows = np.where(rng.random(rows.shape) < 0.15, specials, rows)
    rows = rows.astype("int32")
    for separator in (" ", ""):
        detokenize = saved_model.detokenizer(p.get_config(), separator)
        got = [s.decode() for s in detokenize(tf.constant(rows)).numpy()]
        assert got == p.decode(rows, separator=separator)


# `Translator.export` is Keras' `Model.export`, inherited; docs/export.md
# has the matrix of formats and backends. Every format holds the logits
# model `call((context_tokens, target_in))`, not the generation loop nor the
# text processing.


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="no Model.export format round-trips the Translator on torch with "
    "this project's packages: tf_saved_model needs torch_xla, onnx fails on "
    "aten::take_along_dim (opset 20), and the torch format's program "
    "(torch.export) refuses other shapes than the export's sample inputs "
    "(a shape guard fails); see docs/export.md",
)
def test_translator_export_writes_the_logits_model(tmp_path):
    import tensorflow as tf

    keras.utils.set_random_seed(2)
    model = Translator(10, 12, 4)
    context = np.array([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]], "int32")
    target_in = np.array([[2, 6, 7], [2, 8, 0]], "int32")
    expected = keras.ops.convert_to_numpy(model((context, target_in)))
    path = str(tmp_path / "logits")
    spec = keras.InputSpec(shape=(None, None), dtype="int32")
    # The inputs of the traced call are checked by nobody (a served model's
    # caller is): no contract warning.
    with checked():
        model.export(
            path, format="tf_saved_model", input_signature=[(spec, spec)]
        )
    served = tf.saved_model.load(path)

    def logits(context, target_in):
        return served.serve((context, target_in)).numpy()

    # The same float32 computation, compiled differently: 1e-5.
    np.testing.assert_allclose(
        logits(context, target_in), expected, rtol=1e-5, atol=1e-5
    )
    # Another batch size and length: the exported shapes are dynamic.
    longer = np.array([[2, 9, 3, 0, 0, 0, 0]], "int32")
    np.testing.assert_allclose(
        logits(longer, target_in[:1]),
        keras.ops.convert_to_numpy(model((longer, target_in[:1]))),
        rtol=1e-5,
        atol=1e-5,
    )
