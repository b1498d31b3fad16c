"""The translator as a keras-hub task (#46): `TranslatorBackbone`,
`TranslatorSeq2SeqLMPreprocessor` and `TranslatorSeq2SeqLM`.

One small task is trained on strings per module (six word pairs, memorised)
and shared by the tests. The oracle of `generate` is the lower level it is
built on, `TextTranslator.translate`, on the same weights; the oracle of a
preset is the task that wrote it (weights bit for bit, the same strings),
also across backends (`preset_worker.py`, in subprocesses, once).
"""

import json
import os
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest

from backends_tests import tensorflow_only
from backends_tests.seq2seq import preset_worker
from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import TranslatorBackbone
from kmodels.seq2seq import TranslatorSeq2SeqLM
from kmodels.seq2seq import TranslatorSeq2SeqLMPreprocessor

np_ = keras.ops.convert_to_numpy
SOURCES = [
    "hola casa",
    "buenos dias",
    "la casa es grande",
    "hola amigo",
    "el perro come",
    "buenas noches amigo",
]
TARGETS = [
    "hello house",
    "good morning",
    "the house is big",
    "hello friend",
    "the dog eats",
    "good night friend",
]
PAIRS = {"encoder_text": SOURCES, "decoder_text": TARGETS}
# Measured (2026-12-07): the loss falls from 2.6-2.7 to 0.02-0.05 in 40
# epochs of one batch at 1e-2 on every backend, and greedy decoding then
# writes every target.
EPOCHS = 40
BEAM = dict(sampler="beam", num_beams=3)
WORKER = "backends_tests.seq2seq.preset_worker"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _task(units=16):
    src, tgt = TextProcessor(8), TextProcessor(8)
    src.adapt(SOURCES)
    tgt.adapt(TARGETS)
    return TranslatorSeq2SeqLM(
        TranslatorBackbone(src.vocabulary_size, tgt.vocabulary_size, units),
        TranslatorSeq2SeqLMPreprocessor(src, tgt),
    )


@pytest.fixture(scope="module")
def trained():
    keras.utils.set_random_seed(0)
    lm = _task()
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = lm.fit(PAIRS, epochs=EPOCHS, batch_size=6, verbose=0)
    return lm, history.history["loss"]


def _weights(model):
    return [np_(w) for w in model.weights]


def test_the_task_trains_on_strings(trained):
    lm, losses = trained
    assert losses[-1] < 0.05 * losses[0], losses
    assert lm.generate(SOURCES) == TARGETS
    assert lm.generate(SOURCES[0]) == TARGETS[0]
    # Sources as `x` and targets as `y` are the same batch as the dict.
    pre = lm.preprocessor
    by_dict = pre(PAIRS)
    by_pair = pre(SOURCES, TARGETS)
    for a, b in zip(keras.tree.flatten(by_dict), keras.tree.flatten(by_pair)):
        np.testing.assert_array_equal(np_(a), np_(b))
    # keras-hub's layout: the decoder reads the targets shifted right,
    # from [START]; the weights mark the real target positions.
    x, y, weight = by_dict
    decoder = x["decoder_token_ids"]
    assert (decoder[:, 0] == pre.target_processor.start_id).all()
    np.testing.assert_array_equal(decoder[:, 1:], y[:, :-1])
    np.testing.assert_array_equal(weight, (y != 0).astype("float32"))
    assert y.shape == (6, pre.decoder_sequence_length)
    assert x["encoder_token_ids"].shape == (6, pre.encoder_sequence_length)
    # evaluate and predict read strings too.
    loss, accuracy = lm.evaluate(PAIRS, verbose=0)
    assert loss < 0.05 * losses[0] and accuracy == 1.0
    logits = lm.predict(PAIRS, verbose=0)
    assert logits.shape == (6, 7, lm.backbone.target_vocabulary_size)
    np.testing.assert_array_equal(np.argmax(logits, -1) * (y != 0), y)


def test_keras_file_keeps_the_optimizer_state(trained, tmp_path):
    # First after the fixture's `fit` (later tests recompile, which makes a
    # new optimizer). The file says "auto" for `jit_compile`: each backend
    # resolves it (never torch.compile on torch for a file saved on JAX).
    lm, _ = trained
    lm.save(str(tmp_path / "task.keras"))
    again = keras.saving.load_model(str(tmp_path / "task.keras"))
    assert type(again) is TranslatorSeq2SeqLM
    assert again.get_compile_config()["jit_compile"] == "auto"
    state = [np_(v) for v in lm.optimizer.variables]
    assert len(state) == 2 + 2 * len(lm.trainable_weights)
    assert len(again.optimizer.variables) == len(state)
    for a, b in zip(
        _weights(lm) + state,
        _weights(again) + [np_(v) for v in again.optimizer.variables],
    ):
        np.testing.assert_array_equal(a, b)
    assert again.generate(SOURCES) == TARGETS


def test_generate_equals_translate(trained):
    lm, _ = trained
    bundle = lm.text_translator()
    # `max_length` counts the decoder's [START], as in keras-hub.
    for max_length in (3, 8):
        assert lm.generate(SOURCES, max_length=max_length) == (
            bundle.translate(SOURCES, max_length=max_length - 1)
        )
    got = lm.generate(SOURCES, max_length=6, return_scores=True, **BEAM)
    expected = bundle.translate(
        SOURCES, max_length=5, return_scores=True, **BEAM
    )
    assert got[0] == expected[0]
    np.testing.assert_array_equal(got[1], expected[1])
    # The compiled sampler: a keras-hub instance.
    lm.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=3))
    try:
        two = lm.generate(SOURCES, num_return_sequences=2)
        assert two == bundle.translate(
            SOURCES, max_length=7, num_return_sequences=2, **BEAM
        )
        assert [row[0] for row in two] == TARGETS
    finally:
        lm.compile(sampler="greedy")
    # kmodels' own options reach the loop.
    options = dict(min_length=4, banned_ids=[5], no_repeat_ngram_size=2)
    assert lm.generate(SOURCES, **options) == bundle.translate(
        SOURCES, max_length=7, **options
    )


def test_a_seeded_keras_hub_sampler_is_reproducible(trained):
    lm, _ = trained
    outputs = []
    for _ in range(2):
        lm.compile(sampler=keras_hub.samplers.TopKSampler(k=3, seed=7))
        outputs.append(lm.generate(SOURCES, temperature=None))
    lm.compile(sampler="greedy")
    assert outputs[0] == outputs[1]
    seeded = [
        lm.generate(SOURCES, sampler="top_k", k=3, seed=11) for _ in range(2)
    ]
    assert seeded[0] == seeded[1]


def test_stop_token_ids(trained):
    lm, _ = trained
    end = lm.backbone.end_id
    assert lm.generate(SOURCES, stop_token_ids=[end]) == TARGETS
    # Another stop id ends a sequence after it, as [END] does.
    house = lm.preprocessor.target_processor(["house"])[0, 1]
    got = lm.generate(SOURCES, stop_token_ids=(end, int(house)))
    expected = [
        t.split("house")[0] + "house" if "house" in t else t for t in TARGETS
    ]
    assert got == expected
    for bad, match in (
        (None, "always stops at"),
        ([int(house)], r"must hold the \[END\] id"),
        ([end, 10_000], r"must lie in \[1, "),
    ):
        with pytest.raises(ValueError, match=match):
            lm.generate(SOURCES, stop_token_ids=bad)
    with pytest.raises(ValueError, match="beam search takes only"):
        lm.generate(SOURCES, stop_token_ids=[end, int(house)], **BEAM)
    with pytest.raises(ValueError, match="without attention or scores"):
        lm.generate(
            SOURCES, stop_token_ids=[end, int(house)], return_scores=True
        )
    with pytest.raises(ValueError, match="must be >= 2"):
        lm.generate(SOURCES, max_length=1)
    with pytest.raises(ValueError, match="decoder prompts"):
        lm.generate({"encoder_text": SOURCES, "decoder_text": TARGETS})
    # keras-hub's empty prompts are no prompts.
    empty = {"encoder_text": SOURCES, "decoder_text": [""] * 6}
    assert lm.generate(empty) == TARGETS


def test_preprocessed_ids_and_a_task_without_preprocessor(trained):
    lm, _ = trained
    ids = lm.preprocessor.generate_preprocess(SOURCES)
    assert lm.generate(ids) == TARGETS
    texts, attention, scores = lm.generate(
        ids, return_attention=True, return_scores=True, **BEAM
    )
    expected = lm.generate(
        SOURCES, return_attention=True, return_scores=True, **BEAM
    )
    assert texts == expected[0]
    np.testing.assert_array_equal(attention, expected[1])
    np.testing.assert_array_equal(scores, expected[2])
    # Without a preprocessor: ids in, ids out (keras-hub's convention),
    # those of the translator's own `generate`.
    bare = TranslatorSeq2SeqLM(lm.backbone)
    out = bare.generate(ids, max_length=8, return_scores=True)
    own, _, own_scores = lm.backbone.translator.generate(
        ids["encoder_token_ids"], max_length=7, return_scores=True
    )
    assert sorted(out) == ["decoder_token_ids", "scores"]
    np.testing.assert_array_equal(out["decoder_token_ids"], np_(own))
    np.testing.assert_array_equal(out["scores"], np_(own_scores))
    assert lm.preprocessor.generate_postprocess(out) == TARGETS
    with pytest.raises(ValueError, match="`max_length` is required"):
        bare.generate(ids)


def test_bad_ids_are_refused_before_any_compiled_step(trained):
    lm, _ = trained
    x, y, weight = lm.preprocessor(PAIRS)
    x = dict(x)
    x["encoder_token_ids"] = x["encoder_token_ids"].copy()
    x["encoder_token_ids"][0, 1] = lm.backbone.context_vocabulary_size
    before = _weights(lm)
    message = r"context_tokens must lie in \[0, "
    with pytest.raises(ValueError, match=message):
        lm.fit(x, y, sample_weight=weight, epochs=1, verbose=0)
    with pytest.raises(ValueError, match=message):
        lm.evaluate(x, y, verbose=0)
    with pytest.raises(ValueError, match=message):
        lm.predict(x, verbose=0)
    for a, b in zip(before, _weights(lm)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="expects ids as a dict"):
        lm.fit((x["encoder_token_ids"], x["decoder_token_ids"]), y, verbose=0)
    with pytest.raises(TypeError, match=r"`decoder_text`\[1\] must be a str"):
        lm.fit({"encoder_text": SOURCES[:2], "decoder_text": ["a", 3]})
    with pytest.raises(ValueError, match="2 sources and 1 targets"):
        lm.preprocessor(SOURCES[:2], TARGETS[:1])


def test_sequence_lengths_resize_the_processors(trained):
    lm, _ = trained
    pre = TranslatorSeq2SeqLMPreprocessor.from_config(
        lm.preprocessor.get_config()
    )
    assert (pre.encoder_sequence_length, pre.decoder_sequence_length) == (8, 7)
    # keras-hub's `sequence_length` is the decoder's: 4 decoder ids, so
    # target rows of [START], at most 3 words and [END].
    pre.sequence_length = 4
    pre.encoder_sequence_length = 5
    assert pre.target_processor.max_length == 5
    assert (
        pre.context_processor.vocabulary
        == lm.preprocessor.context_processor.vocabulary
    )
    x, y, _ = pre(PAIRS)
    assert x["encoder_token_ids"].shape == (6, 5)
    assert x["decoder_token_ids"].shape == y.shape == (6, 4)
    # The oracle: the words of the full-length rows, cut to 3.
    full = lm.preprocessor.target_processor(TARGETS)
    start, end = pre.target_processor.start_id, pre.target_processor.end_id
    for row, long_row in zip(y, full):
        words = [i for i in long_row[1:] if i not in (0, end)][:3]
        expected = words + [end] + [0] * (4 - len(words) - 1)
        assert row.tolist() == expected
    assert (x["decoder_token_ids"][:, 0] == start).all()
    with pytest.raises(ValueError, match="decoder_sequence_length"):
        pre.decoder_sequence_length = 1
    with pytest.raises(ValueError, match="encoder_sequence_length"):
        pre.encoder_sequence_length = 2.5
    assert pre.decoder_sequence_length == 4
    # As keras-hub's constructor arguments too.
    again = TranslatorSeq2SeqLMPreprocessor(
        pre.context_processor, pre.target_processor, decoder_sequence_length=6
    )
    assert again.target_processor.max_length == 7


def test_a_tf_data_dataset_of_strings_trains_as_arrays_do():
    # keras-hub's `fit` maps the preprocessor over a tf.data dataset; the
    # Python text pipeline runs there through `tf.numpy_function`. Same
    # batches in the same order as the arrays (no shuffling): the same
    # losses, to float32 rounding.
    import tensorflow as tf

    losses = []
    for data in ("arrays", "dataset"):
        keras.utils.set_random_seed(3)
        lm = _task(units=4)
        if data == "arrays":
            history = lm.fit(
                PAIRS, batch_size=3, epochs=2, shuffle=False, verbose=0
            )
        else:
            dataset = tf.data.Dataset.from_tensor_slices(PAIRS).batch(3)
            history = lm.fit(dataset, epochs=2, verbose=0)
            # `generate` takes the dataset too (its source texts).
            assert lm.generate(dataset) == lm.generate(SOURCES)
        losses.append(history.history["loss"])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert losses[0][1] < losses[0][0]


def test_preset_round_trip(trained, tmp_path):
    lm, _ = trained
    lm.save_to_preset(str(tmp_path))
    loaded = keras_hub.models.Seq2SeqLM.from_preset(str(tmp_path))
    assert type(loaded) is TranslatorSeq2SeqLM
    for a, b in zip(_weights(lm), _weights(loaded)):
        np.testing.assert_array_equal(a, b)
    assert loaded.generate(SOURCES) == TARGETS
    assert (
        loaded.preprocessor.get_config()["target_processor"]
        == lm.preprocessor.get_config()["target_processor"]
    )
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path))
    assert type(backbone) is TranslatorBackbone
    assert backbone.get_config() == lm.backbone.get_config()
    pre = keras_hub.models.Seq2SeqLMPreprocessor.from_preset(
        str(tmp_path), decoder_sequence_length=4
    )
    assert type(pre) is TranslatorSeq2SeqLMPreprocessor
    assert pre.decoder_sequence_length == 4
    # The bundle API and the task are one model.
    task = TranslatorSeq2SeqLM.from_text_translator(lm.text_translator())
    assert task.generate(SOURCES, **BEAM) == lm.generate(SOURCES, **BEAM)


# Runs in the TensorFlow-only process (Keras and kmodels blocked).
_SERVE = r"""
import json
import sys

for name in ("keras", "kmodels", "keras_hub", "jax", "torch"):
    sys.modules[name] = None
import tensorflow as tf

path, texts = json.load(sys.stdin)
nbest = tf.saved_model.load(path).signatures["nbest"](tf.constant(texts))
print(json.dumps({
    "translations": [
        [s.decode("utf-8") for s in row]
        for row in nbest["translations"].numpy().tolist()
    ],
    "scores": nbest["scores"].numpy().tolist(),
    "attention": nbest["attention"].numpy().tolist(),
}))
"""


@pytest.mark.backend_independent(
    reason="the task's export is TextTranslator.export of the backbone's "
    "Translator, traced in TensorFlow whatever the backend (export_test.py "
    "and subword_test.py serve those); 5-8 s a backend"
)
def test_export_serves_what_generate_returns(trained, tmp_path):
    lm, _ = trained
    path = str(tmp_path / "served")
    lm.export(path, num_return_sequences=2, **BEAM)
    served = tensorflow_only.run(_SERVE, [path, SOURCES])
    texts, attention, scores = lm.generate(
        SOURCES,
        num_return_sequences=2,
        return_attention=True,
        return_scores=True,
        **BEAM,
    )
    assert served["translations"] == texts
    np.testing.assert_allclose(served["scores"], scores, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        served["attention"], attention, rtol=1e-4, atol=1e-5
    )


@pytest.mark.cross_backend(
    reason="a preset saved on each backend loads on the other two, in "
    "two subprocesses beside this one"
)
def test_presets_cross_backends(tmp_path):
    # Every backend builds the same weights (NumPy draws), saves its
    # preset and its greedy outputs, then loads the others' presets: the
    # strings must be the saving backend's.
    others = [b for b in preset_worker.BACKENDS if b != keras.backend.backend()]
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", WORKER, str(tmp_path)],
            cwd=ROOT,
            env={**env, "KERAS_BACKEND": backend},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for backend in others
    ]
    mine = preset_worker.main(str(tmp_path))
    results = [mine]
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    saved = {r["backend"]: r["outputs"] for r in results}
    assert sorted(saved) == ["jax", "tensorflow", "torch"]
    for result in results:
        assert sorted(result["loaded"]) == sorted(
            b for b in saved if b != result["backend"]
        )
        for origin, outputs in result["loaded"].items():
            assert outputs == saved[origin], (result["backend"], origin)
