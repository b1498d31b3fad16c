"""Exports: `TextTranslator.export` (a SavedModel that TensorFlow alone
serves) and `Translator.export` (Keras' formats, the logits model).

The round trip trains a small date translator on the running backend,
exports it (a TensorFlow subprocess), then serves it from a fresh Python
process in which Keras and kmodels cannot be imported (an import hook
refuses them: `import tensorflow` itself imports Keras when it is
installed, so only a refusal proves that the SavedModel does not need it), and
compares its strings with `TextTranslator.translate` on the 500 held-out
dates of `kmodels.datasets.dates` and on edge cases.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from kmodels.contracts.checks import checked
from kmodels.datasets.dates import DATE_TEXT
from kmodels.datasets.dates import date_split
from kmodels.seq2seq.losses import masked_loss
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.translator import Translator

HELD_OUT = 500
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

# Runs in a fresh interpreter: Keras, kmodels and the other frameworks
# cannot be imported (TensorFlow's own `import keras` fails quietly),
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
print(json.dumps({
    "translations": [s.decode("utf-8") for s in out.numpy().tolist()],
    "signature": [
        s.decode("utf-8") for s in signature["output_0"].numpy().tolist()
    ],
    "empty_batch_shape": list(empty_batch.shape),
    "imported": sorted(
        m for m in sys.modules
        if m.split(".")[0] in BLOCKED and sys.modules[m] is not None
    ),
}))
"""


def _serve(path, texts):
    done = subprocess.run(
        [sys.executable, "-c", _SERVE],
        input=json.dumps([path, texts]),
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small date translator trained on this backend, its export, and the
    strings the TensorFlow-only process returned."""
    keras.utils.set_random_seed(0)
    (train_src, train_tgt), (test_src, test_tgt) = date_split(
        2000, HELD_OUT, seed=1
    )
    source = TextProcessor(8, **DATE_TEXT)
    target = TextProcessor(7, **DATE_TEXT)
    source.adapt(train_src)
    target.adapt(train_tgt)
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        16,
        start_id=target.start_id,
        end_id=target.end_id,
    )
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
    bundle.export(path)
    texts = test_src + EDGE_CASES + EMPTY
    served = _serve(path, texts)
    return bundle, path, test_src, test_tgt, served


def test_export_serves_translate_strings_with_tensorflow_alone(exported):
    bundle, path, test_src, test_tgt, served = exported
    assert served["imported"] == []
    got = served["translations"]
    assert len(got) == HELD_OUT + len(EDGE_CASES) + len(EMPTY)
    # The 500 held-out dates and the edge cases: the same strings.
    expected = bundle.translate(test_src + EDGE_CASES)
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
    scores = bundle.evaluate(list(zip(test_src + EDGE_CASES, references)))
    matches = sum(e == r for e, r in zip(expected, references))
    assert scores["exact_match"] == matches / len(references)
    assert scores["count"] == len(references)
    assert 0.0 <= scores["bleu"] <= 1.0
    held_out = np.mean(np.equal(expected, references)[:HELD_OUT])
    print(f"held-out exact match {held_out:.3f}; evaluate: {scores}")


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


def test_export_refuses_bad_paths_and_unbuilt_models(exported, tmp_path):
    bundle = exported[0]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="expects a folder path"):
        bundle.export(str(tmp_path / "file"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="holds other files than a Saved"):
        bundle.export(str(tmp_path / "other"))
    with pytest.raises(ValueError, match="max_length"):
        bundle.export(str(tmp_path / "new"), max_length=0)
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


def test_export_refuses_subword_processors(tmp_path):
    # Subwords need tensorflow_text's WordPiece ops in the graph, which a
    # TensorFlow-only process cannot load: refused before anything runs.
    pieces = ["", "[UNK]", "[START]", "[END]", "a", "b", "##a", "##b"]
    subwords = TextProcessor(8, tokenizer="wordpiece", vocabulary=pieces)
    words = TextProcessor(8, vocabulary=["", "[UNK]", "[START]", "[END]", "x"])
    model = Translator(words.vocabulary_size, subwords.vocabulary_size, 4)
    bundle = TextTranslator(model, words, subwords)
    with pytest.raises(
        NotImplementedError,
        match=r"target_processor has \{'tokenizer': 'wordpiece'\}",
    ):
        bundle.export(str(tmp_path / "sm"))
    assert not (tmp_path / "sm").exists()


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
