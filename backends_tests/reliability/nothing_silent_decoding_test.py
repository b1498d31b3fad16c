"""Nothing silent in decoding and its diagnostics (issue 43, items 4, 5,
7, 11, 12, 15, 18 and 20): each input that used to be accepted and give a
meaningless result, or to fail with a backend's own error, now gets a
clear error naming the argument, or the result it asked for, the same on
every backend.

- `length_penalty` too large for float32 scores (item 4) is refused;
- nested `banned_ids` (item 5) is refused, not flattened;
- `GradientFlowCheck` on a model without trainable weights (item 7);
- `GradientFlowCheck`'s argument checks (item 18);
- `plot_gradient_history` takes a `GradientFlowCheck` (item 20);
- `TextProcessor.adapt` on digit-only texts names `keep_digits` (item 11);
- BLEU of a `TextTranslator` joining tokens with `separator=""` (item 12);
- `PatchEmbedding(padding="same")` first called on a small image (item 15).
"""

import math
import warnings

import keras
import numpy as np
import pytest

from kmodels.callbacks import GradientFlowCheck
from kmodels.diagnostics import check_gradient_flow
from kmodels.diagnostics import plot_gradient_history
from kmodels.layers import PatchEmbedding
from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import TextTranslator
from kmodels.seq2seq import Translator

np_ = keras.ops.convert_to_numpy

CONTEXT = np.array([[5, 6, 7, 0], [4, 4, 9, 8]], "int32")


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(0)
    return Translator(12, 10, units=4, start_id=1, end_id=2)


@pytest.mark.parametrize(
    "penalty, got",
    [
        (25.0, r"25.0 \(float\)"),
        (-25.0, r"-25.0 \(float\)"),
        (12, r"12 \(int\)"),
        (np.float32(-12), r".*-12.0.* \(float32\)"),
    ],
)
def test_length_penalty_float32_cannot_hold_is_refused(
    translator, penalty, got
):
    bound = math.log(1e20) / math.log(50)
    with pytest.raises(
        ValueError,
        match=r"Translator.generate: `length_penalty` must be in "
        rf"\[-{bound:.4g}, {bound:.4g}\] for max_length=50 .*; got " + got,
    ):
        translator.generate(
            CONTEXT, 50, sampler="beam", num_beams=2, length_penalty=penalty
        )


def test_length_penalty_at_the_bound_keeps_finite_scores(translator):
    # max_length=6 allows |penalty| <= ln(1e20) / ln(6) = 25.7.
    ids, _, raw = translator.generate(CONTEXT, 6, return_scores=True)
    ids2, _, scores = translator.generate(
        CONTEXT, 6, return_scores=True, length_penalty=25.0
    )
    np.testing.assert_array_equal(np_(ids), np_(ids2))
    lengths = np.minimum((np_(ids) != 0).sum(-1) + 1, 6).astype("float64")
    expected = np_(raw).astype("float64") / lengths**25.0
    assert np.all(np.isfinite(np_(scores))) and np.all(np_(scores) < 0)
    np.testing.assert_allclose(np_(scores), expected, rtol=1e-5)


@pytest.mark.parametrize(
    "banned", [[[4, 5]], [4, [5]], np.array([[4, 5]]), ((4,), (5,))]
)
def test_nested_banned_ids_are_refused(translator, banned):
    with pytest.raises(
        TypeError,
        match=r"Translator.generate: `banned_ids` must be a flat list of "
        r"token ids \(integers in \[0, 10\)\), or None; got ",
    ):
        translator.generate(CONTEXT, 4, banned_ids=banned)


def _no_weights_model():
    inputs = keras.Input((3,))
    outputs = keras.layers.Lambda(
        lambda t: keras.ops.sum(t, axis=-1, keepdims=True)
    )(inputs)
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    return model


def test_gradient_flow_check_without_trainable_weights():
    x = np.arange(12, dtype="float32").reshape(4, 3) / 10
    y = x.sum(-1, keepdims=True)
    model = _no_weights_model()
    report = check_gradient_flow(model, x[:2], y[:2])
    assert report.variables == []
    assert report.loss == 0.0
    check = GradientFlowCheck((x, y))
    with warnings.catch_warnings():
        # Keras' own "no trainable weights" warning (TensorFlow and torch).
        warnings.simplefilter("ignore", UserWarning)
        model.fit(x, y, epochs=1, batch_size=4, verbose=0, callbacks=[check])
    assert check.report.variables == []
    assert check.report.loss == 0.0


@pytest.mark.parametrize(
    "options, error, message",
    [
        (
            dict(every_n_steps=True),
            ValueError,
            r"`every_n_steps` must be an integer >= 1; got True \(bool\)",
        ),
        (
            dict(every_n_steps=2, patience=True),
            ValueError,
            r"`patience` must be an integer >= 1; got True \(bool\)",
        ),
        (
            dict(every_n_steps=2, log_dir=5),
            TypeError,
            r"`log_dir` must be None or a folder path \(a str or "
            r"os.PathLike\); got 5 \(int\)",
        ),
    ],
)
def test_gradient_flow_check_arguments(options, error, message):
    batch = (np.zeros((2, 3), "float32"), np.zeros((2, 1), "float32"))
    with pytest.raises(error, match="GradientFlowCheck: " + message):
        GradientFlowCheck(batch, **options)


def test_gradient_flow_check_numpy_ints_and_file_log_dir(tmp_path):
    batch = (np.zeros((2, 3), "float32"), np.zeros((2, 1), "float32"))
    check = GradientFlowCheck(
        batch, every_n_steps=np.int64(4), patience=np.int32(2)
    )
    assert (check.every_n_steps, check.patience) == (4, 2)
    assert type(check.every_n_steps) is int
    path = tmp_path / "events"
    path.write_text("")
    with pytest.raises(
        ValueError,
        match=r"GradientFlowCheck: `log_dir` must be a folder .*; got "
        r"'.*events', an existing file",
    ):
        GradientFlowCheck(batch, every_n_steps=1, log_dir=path)
    # A file made after the callback: refused when `fit` starts.
    later = tmp_path / "later"
    check = GradientFlowCheck(batch, every_n_steps=1, log_dir=later)
    later.write_text("")
    model = _no_weights_model()
    with pytest.raises(ValueError, match="`log_dir` must be a folder"):
        model.fit(*batch, epochs=1, verbose=0, callbacks=[check])
    assert check.monitor is None


def test_plot_gradient_history_takes_a_gradient_flow_check(tmp_path):
    pytest.importorskip("matplotlib")
    keras.utils.set_random_seed(0)
    x = np.arange(12, dtype="float32").reshape(4, 3) / 10
    y = x.sum(-1, keepdims=True)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    check = GradientFlowCheck((x, y), every_n_steps=1)
    model.fit(x, y, epochs=1, batch_size=4, verbose=0, callbacks=[check])
    by_check = plot_gradient_history([check], tmp_path / "check.png")
    by_monitor = plot_gradient_history([check.monitor], tmp_path / "m.png")
    assert by_check == tmp_path / "check.png"
    assert by_check.read_bytes() == by_monitor.read_bytes()
    assert by_check.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(
        ValueError, match="plot_gradient_history: the GradientFlowCheck has"
    ):
        plot_gradient_history(GradientFlowCheck((x, y)), tmp_path / "n.png")
    with pytest.raises(
        TypeError,
        match="plot_gradient_history expects GradientMonitor or "
        "GradientFlowCheck objects .*; got dict",
    ):
        plot_gradient_history([{}], tmp_path / "d.png")


def test_adapt_on_digits_only_names_keep_digits():
    with pytest.raises(
        ValueError,
        match=r"TextProcessor.adapt found no word in the texts it was given "
        r"\(2 texts\); the texts contain digits, which are dropped unless "
        r"`keep_digits=True`\.",
    ):
        TextProcessor().adapt(["12 34", "5"])
    # Without digits the message stays as it was.
    with pytest.raises(ValueError, match=r"it was given \(1 texts\)\.$"):
        TextProcessor().adapt(["日本"])
    processor = TextProcessor(keep_digits=True)
    processor.adapt(["12 34", "5"])
    assert sorted(processor.vocabulary[-3:]) == ["12", "34", "5"]


def test_bleu_with_empty_separator_counts_the_model_tokens():
    keras.utils.set_random_seed(0)
    # Target tokens "-" and "'": each split apart by the processor, not by
    # 13a (which splits "+", "(", ...).
    source = TextProcessor(punctuation="-'")
    target = TextProcessor(punctuation="-'")
    source.adapt(["a-b-c", "c'b'a"])
    target.adapt(["- ' -", "' - '"])
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        units=4,
        start_id=target.start_id,
        end_id=target.end_id,
    )
    bundle = TextTranslator(model, source, target, separator="")
    options = dict(
        max_length=8, min_length=8, banned_ids=[target.unk_id, target.start_id]
    )
    sources = ["a-b-c", "c'b'a"]
    outputs = bundle.translate(sources, **options)
    # Seven or eight tokens each, written without spaces ("-'--'-'"):
    # one 13a token per output, whose BLEU against itself used to be 0.
    assert all(" " not in o and len(target.tokenize(o)) >= 9 for o in outputs)
    scores = bundle.evaluate((sources, outputs), **options)
    assert scores["exact_match"] == 1.0
    assert scores["bleu"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("size", [(1, 1), (3, 2), (2, 5)])
def test_patch_embedding_same_first_call_on_a_small_image(size):
    keras.utils.set_random_seed(0)
    image = np.arange(size[0] * size[1] * 2, dtype="float32").reshape(
        1, *size, 2
    )
    layer = PatchEmbedding((4, 3), 5, padding="same")
    first = np_(layer(image))
    # The same layer built on a larger image first gives the same vectors:
    # the image padded with zeros at the bottom and right, one patch per
    # side of 4 x 3 or less.
    rows, cols = -(-size[0] // 4), -(-size[1] // 3)
    assert first.shape == (1, rows * cols, 5)
    padded = np.zeros((1, rows * 4, cols * 3, 2), "float32")
    padded[:, : size[0], : size[1]] = image
    kernel, bias = (np_(w) for w in layer.projection.weights)
    patches = padded.reshape(1, rows, 4, cols, 3, 2).transpose(0, 1, 3, 2, 4, 5)
    expected = patches.reshape(1, rows * cols, -1) @ kernel.reshape(-1, 5)
    np.testing.assert_allclose(first, expected + bias, rtol=1e-5, atol=1e-5)
    later = PatchEmbedding((4, 3), 5, padding="same")
    later(np.zeros((1, 8, 6, 2), "float32"))
    later.set_weights(layer.get_weights())
    np.testing.assert_allclose(np_(later(image)), first, rtol=1e-6)
