"""The input contract table (docs/reliability.md), walked.

Every (entry point x bad input) pair raises the same exception type and the
exact same message on every backend, leaves every weight and optimizer
variable bit-identical, and the next good call works. Models are built and
compiled once per module (JAX compilation is the cost).
"""

import warnings

import keras
import numpy as np
import pytest

import kmodels
from backends_tests.refusals import raises_exactly
from kmodels.contracts.checks import unchecked_warning
from kmodels.growable.embedding import GrowableEmbedding
from kmodels.layers.positional_embedding import PositionalEmbedding
from kmodels.seq2seq import CrossAttention
from kmodels.seq2seq import Decoder
from kmodels.seq2seq import Encoder
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_loss

BACKEND = keras.backend.backend()
VOCAB = 20
CONTEXT = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
TARGET_IN = np.array([[2, 5, 6], [2, 7, 0]])
TARGET_OUT = np.array([[5, 6, 3], [7, 3, 0]])


def _with(value, row=0, col=1, dtype=None):
    bad = np.array(CONTEXT, dtype=dtype or CONTEXT.dtype)
    bad[row, col] = value
    return bad


RANGE = (
    "context_tokens must lie in [0, 20) (vocabulary_size=20); got values "
    "{values} (min {low}, max {high})"
)
# (case, bad context_tokens, exception, message after "Translator: ")
CONTEXT_CASES = [
    (
        "id == vocabulary_size",
        _with(20),
        ValueError,
        RANGE.format(values=[20], low=0, high=20),
    ),
    (
        "negative id",
        _with(-1),
        ValueError,
        RANGE.format(values=[-1], low=-1, high=7),
    ),
    (
        "fractional float id",
        _with(3.5, dtype="float32"),
        ValueError,
        "context_tokens must hold whole-number token ids; got [3.5] (dtype "
        "float32).",
    ),
    (
        "int64 id 2**32+3",
        _with(2**32 + 3, dtype="int64"),
        ValueError,
        RANGE.format(values=[2**32 + 3], low=0, high=2**32 + 3),
    ),
    (
        "empty batch",
        np.zeros((0, 4), "int32"),
        ValueError,
        "context_tokens must hold at least one example and one position "
        "(batch, s); got shape (0, 4).",
    ),
    (
        "sequence length 0",
        np.zeros((2, 0), "int32"),
        ValueError,
        "context_tokens must hold at least one example and one position "
        "(batch, s); got shape (2, 0).",
    ),
    (
        "rank-1 ids",
        np.array([3, 4]),
        ValueError,
        "context_tokens must be a 2-D array of token ids (batch, s); got shape "
        "(2,).",
    ),
    (
        "bool ids",
        CONTEXT > 3,
        TypeError,
        "context_tokens must hold integer token ids (batch, s); got dtype "
        "bool.",
    ),
    (
        "batch mismatch",
        CONTEXT[:1],
        ValueError,
        "context_tokens and target_in must have the same batch size; got 1 "
        "and 2.",
    ),
]


def _state(model):
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None:
        variables += list(model.optimizer.variables)
    return [np.array(keras.ops.convert_to_numpy(v)) for v in variables]


def _assert_same(before, after):
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _generator(x, y):
    def batches():
        yield x, y

    return batches()


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(0)
    model = Translator(VOCAB, VOCAB, 4)
    model.compile(keras.optimizers.Adam(0.01), masked_loss)
    model.fit((CONTEXT, TARGET_IN), TARGET_OUT, verbose=0)
    return model


ENTRY_POINTS = {
    "eager call": lambda m, x, y: m(x),
    "fit": lambda m, x, y: m.fit(x, y, verbose=0),
    "fit on a generator": lambda m, x, y: m.fit(
        _generator(x, y), steps_per_epoch=1, verbose=0
    ),
    "evaluate": lambda m, x, y: m.evaluate(x, y, verbose=0),
    "predict": lambda m, x, y: m.predict(x, verbose=0),
    "train_on_batch": lambda m, x, y: m.train_on_batch(x, y),
    "test_on_batch": lambda m, x, y: m.test_on_batch(x, y),
    "predict_on_batch": lambda m, x, y: m.predict_on_batch(x),
}


def _refused(model, run, exception, message):
    before = _state(model)
    with raises_exactly(exception, message):
        run()
    _assert_same(before, _state(model))


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_translator_contract_table(translator, entry):
    run = ENTRY_POINTS[entry]
    for case, bad, exception, message in CONTEXT_CASES:
        target, y = TARGET_IN, TARGET_OUT
        if entry == "fit on a generator" and case in (
            "empty batch",
            "batch mismatch",
            "rank-1 ids",
            "sequence length 0",
        ):
            continue  # Keras' data adapter refuses these first.
        _refused(
            translator,
            lambda: run(translator, (bad, target), y),
            exception,
            "Translator: " + message,
        )
    # Still usable: a good call after the refusals works, finite.
    out = ENTRY_POINTS["predict"](translator, (CONTEXT, TARGET_IN), None)
    assert out.shape == (2, 3, VOCAB) and np.all(np.isfinite(out))
    if entry in ("fit", "train_on_batch", "fit on a generator"):
        before = _state(translator)
        translator.fit((CONTEXT, TARGET_IN), TARGET_OUT, verbose=0)
        after = _state(translator)
        assert all(np.all(np.isfinite(a)) for a in after)
        assert any(a.tobytes() != b.tobytes() for a, b in zip(after, before))


@pytest.mark.parametrize("entry", ["fit", "evaluate", "train_on_batch"])
def test_translator_labels_are_checked(translator, entry):
    bad = TARGET_OUT.copy()
    bad[0, 0] = VOCAB
    _refused(
        translator,
        lambda: ENTRY_POINTS[entry](translator, (CONTEXT, TARGET_IN), bad),
        ValueError,
        "Translator: target_out must lie in [0, 20) (vocabulary_size=20); "
        "got values [20] (min 0, max 20)",
    )


def test_target_in_is_checked(translator):
    bad = TARGET_IN.copy()
    bad[1, 2] = -2
    _refused(
        translator,
        lambda: translator.fit((CONTEXT, bad), TARGET_OUT, verbose=0),
        ValueError,
        "Translator: target_in must lie in [0, 20) (vocabulary_size=20); "
        "got values [-2] (min -2, max 7)",
    )


# ------------------------------------------------------------- layers
def test_layer_eager_contracts():
    encoder = Encoder(VOCAB, 4)
    decoder = Decoder(VOCAB, 4)
    attention = CrossAttention(4)
    context = encoder(CONTEXT)
    cases = [
        (
            lambda: encoder(_with(20)),
            ValueError,
            "Encoder: tokens must lie in [0, 20) (vocabulary_size=20); got "
            "values [20] (min 0, max 20)",
        ),
        (
            lambda: encoder(_with(2**32 + 3, dtype="int64")),
            ValueError,
            "Encoder: tokens must lie in [0, 20) (vocabulary_size=20); got "
            f"values [{2**32 + 3}] (min 0, max {2**32 + 3})",
        ),
        (
            lambda: decoder(context, TARGET_IN[:1]),
            ValueError,
            "Decoder: context and x must have the same batch size; got 2 and "
            "1.",
        ),
        (
            lambda: decoder(
                context, TARGET_IN, context_mask=np.ones((2, 4), "float32")
            ),
            TypeError,
            "Decoder: context_mask must be a boolean mask (batch, s); got "
            "dtype float32.",
        ),
        (
            lambda: (
                decoder(
                    context,
                    TARGET_IN,
                    context_mask=CONTEXT != 0,
                    return_state=True,
                    state=None,
                )
                and decoder(context, np.array([[2, 20, 0], [2, 0, 0]]))
            ),
            ValueError,
            "Decoder: x must lie in [0, 20) (vocabulary_size=20); got values "
            "[20] (min 0, max 20)",
        ),
        (
            lambda: attention(
                np.zeros((2, 3, 4), "float32"),
                context,
                context_mask=np.ones((2, 5), bool),
            ),
            ValueError,
            "CrossAttention: context_mask must have the shape (batch, s) = "
            "(2, 4) of the context; got (2, 5).",
        ),
    ]
    for run, exception, message in cases:
        with pytest.raises(exception) as caught:
            run()
        assert str(caught.value) == message


def test_positional_embedding_tensor_start_index():
    layer = PositionalEmbedding(keras.layers.Embedding(VOCAB, 4), 5)
    ids = np.array([[1, 2, 3]])
    layer(ids)
    with pytest.raises(ValueError) as caught:
        layer(ids, start_index=keras.ops.convert_to_tensor(4))
    assert str(caught.value) == (
        "PositionalEmbedding holds 5 positions (`sequence_length`); the "
        "inputs need positions 4 to 6 (start_index=4, 3 positions)."
    )
    with pytest.raises(ValueError) as caught:
        layer(np.array([[1, 20]]))
    assert str(caught.value) == (
        "PositionalEmbedding: inputs must lie in [0, 20) (vocabulary_size="
        "20); got values [20] (min 1, max 20)"
    )


def test_growable_embedding_int64_ids():
    layer = GrowableEmbedding(2, initial_capacity=16, max_capacity=64)
    before = layer.capacity
    with pytest.raises(ValueError) as caught:
        layer(np.array([[1, 2**33]], "int64"), training=True)
    assert str(caught.value) == (
        f"GrowableEmbedding '{layer.name}' reached max_capacity=64: got id "
        f"{2**33}, which needs {2**33 + 1} rows. Raise max_capacity or remap "
        "ids."
    )
    assert layer.capacity == before == 16


# ---------------------------------------------- a user's functional model
def _encoder_model():
    keras.utils.set_random_seed(1)
    model = kmodels.models.transformer_encoder(
        keras.layers.Embedding(VOCAB, 4),
        (4,),
        num_classes=2,
        num_heads=1,
        intermediate_dim=4,
    )
    model.compile(
        keras.optimizers.Adam(0.01),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


@pytest.fixture(scope="module", params=["enforce", "plain Keras API"])
def functional(request):
    """A functional model of kmodels layers, with `enforce` or as a user
    builds it (kmodels takes over its entry points when its layers first
    run inside it)."""
    model = _encoder_model()
    if request.param == "enforce":
        kmodels.contracts.enforce(model)
    # Trained once, so the optimizer exists before the refused calls.
    model.fit(CONTEXT, np.array([0, 1]), verbose=0)
    return model


FUNCTIONAL_CASES = [
    (
        _with(20),
        ValueError,
        "PositionalEmbedding: inputs must lie in [0, 20) (vocabulary_size=20); "
        "got values [20] (min 0, max 20)",
    ),
    (
        _with(2**32 + 3, dtype="int64"),
        ValueError,
        "PositionalEmbedding: inputs must lie in [0, 20) (vocabulary_size=20); "
        f"got values [{2**32 + 3}] (min 0, max {2**32 + 3})",
    ),
    (
        _with(3.5, dtype="float32"),
        ValueError,
        "PositionalEmbedding: inputs must hold whole-number token ids; got "
        "[3.5] (dtype float32).",
    ),
    (
        np.zeros((0, 4), "int32"),
        ValueError,
        "PositionalEmbedding: inputs must hold at least one example and one "
        "position (batch, seq); got shape (0, 4).",
    ),
]


@pytest.mark.parametrize(
    "entry",
    [
        "fit",
        "evaluate",
        "predict",
        "train_on_batch",
        "predict_on_batch",
        "fit on a generator",
    ],
)
def test_functional_model_contract_table(functional, entry):
    y = np.array([0, 1])
    run = ENTRY_POINTS[entry]
    for bad, exception, message in FUNCTIONAL_CASES:
        if entry == "fit on a generator" and len(bad) == 0:
            continue  # Keras' data adapter refuses an empty generator.
        _refused(
            functional, lambda: run(functional, bad, y), exception, message
        )
    out = functional.predict(CONTEXT, verbose=0)
    assert out.shape == (2, 2) and np.all(np.isfinite(out))


def test_callback_installs_the_hook():
    # Deprecated in favour of `enforce`, the one way; it still works.
    with pytest.deprecated_call(match=r"kmodels.contracts.enforce\(model\)"):
        callback = kmodels.callbacks.InputContracts()
    keras.utils.set_random_seed(2)
    inputs = keras.Input((None,), dtype="int32")
    outputs = keras.layers.Dense(2)(Encoder(VOCAB, 4)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    before = _state(model)
    with raises_exactly(
        ValueError,
        "Encoder: tokens must lie in [0, 20) (vocabulary_size=20); got "
        "values [20] (min 0, max 20)",
    ):
        model.fit(
            _with(20),
            np.zeros((2, 4, 2)),
            verbose=0,
            callbacks=[callback],
        )
    _assert_same(before, _state(model))
    # The hook stays: train_on_batch is checked as well.
    with pytest.raises(ValueError):
        model.train_on_batch(_with(-1), np.zeros((2, 4, 2)))
    _assert_same(before, _state(model))


def test_growable_unseen_error_predict_int64():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((None,), dtype="int32")
    table = GrowableEmbedding(2, initial_capacity=16, unseen="error")
    model = keras.Model(inputs, table(inputs))
    kmodels.contracts.enforce(model)
    bad = np.array([[1, 2**32 + 3]], "int64")
    message = (
        f"GrowableEmbedding '{table.name}' expects ids below 2**31 (rows are "
        f"int32); got {2**32 + 3}."
    )
    for run in (
        lambda: model.predict(bad, verbose=0),
        lambda: model.predict_on_batch(bad),
        lambda: table(bad),
    ):
        with pytest.raises(ValueError) as caught:
            run()
        assert str(caught.value) == message
    assert table.capacity == 16


# ------------------------------------------------- without the hook
def _functional_calls():
    """Bad calls of the entry points, each the first one of a new plain
    functional model (compiled, never called)."""
    bad = _with(-1)
    y = np.array([0, 1])
    return {
        "fit": lambda m: m.fit(bad, y, verbose=0),
        "evaluate": lambda m: m.evaluate(bad, y, verbose=0),
        "train_on_batch": lambda m: m.train_on_batch(bad, y),
    }


@pytest.mark.parametrize("entry", list(_functional_calls()))
def test_first_call_of_a_plain_functional_model(entry):
    """Keras builds a model's loss with a symbolic call before its first
    `fit`, `evaluate` or `*_on_batch` step on JAX and torch: kmodels' layers
    take over the model's entry points there, and the first step's batch is
    checked. TensorFlow builds inside the first compiled step instead
    (Keras 3.15, `TensorFlowTrainer._maybe_symbolic_build`), so that step
    runs unchecked (kmodels warns) and the checks start at the next step:
    a Keras internal kmodels cannot reach (docs/reliability.md)."""
    model = _encoder_model()
    layer = model.get_layer(index=1)
    message = (
        "PositionalEmbedding: inputs must lie in [0, 20) (vocabulary_size=20)"
        "; got values [-1] (min -1, max 7)"
    )
    run = _functional_calls()[entry]
    weights = [np.array(keras.ops.convert_to_numpy(w)) for w in model.weights]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if BACKEND == "tensorflow":
            run(model)
        else:
            with pytest.raises(ValueError) as refused:
                run(model)
            assert str(refused.value) == message
            # Keras built the optimizer (zero slots) before the step: no
            # weight or slot moved.
            _assert_same(weights, _state(model)[: len(weights)])
            assert int(model.optimizer.iterations) == 0
    ours = [str(w.message) for w in caught if "kmodels" in str(w.message)]
    if BACKEND == "tensorflow":
        assert ours == [unchecked_warning("PositionalEmbedding", layer.name)]
    else:
        assert ours == []
    # From then on, every backend checks every call.
    _refused(model, lambda: run(model), ValueError, message)


def test_nested_and_sequential_models_are_checked():
    """A functional model that calls a functional model of kmodels layers
    on its inputs, and a `keras.Sequential` starting with one, check the
    ids that reach the kmodels layer."""
    keras.utils.set_random_seed(6)
    inner = _encoder_model()
    ids = keras.Input((4,), dtype="int32")
    outer = keras.Model(ids, keras.layers.Dense(2)(inner(ids)))
    sequential = keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            PositionalEmbedding(keras.layers.Embedding(VOCAB, 4), 4),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(2),
        ]
    )
    for model in (outer, sequential):
        model.compile("adam", "mse")
        model.fit(CONTEXT, np.zeros((2, 2)), verbose=0)
        for bad, values in (
            (_with(20), "[20] (min 0, max 20)"),
            (_with(-1), "[-1] (min -1, max 7)"),
        ):
            for run in (
                lambda: model.fit(bad, np.zeros((2, 2)), verbose=0),
                lambda: model.predict(bad, verbose=0),
            ):
                _refused(
                    model,
                    run,
                    ValueError,
                    "PositionalEmbedding: inputs must lie in [0, 20) "
                    f"(vocabulary_size=20); got values {values}",
                )


def test_masked_loss_refuses_integer_logits():
    with pytest.raises(TypeError) as caught:
        masked_loss(TARGET_OUT, np.zeros((2, 3, 5), "int32"))
    assert str(caught.value) == (
        "masked_loss expects float logits y_pred of shape (batch, t, vocab); "
        "got dtype int32. Did you pass the target ids as y_pred?"
    )


# ------------------------------------------------------ PatchEmbedding
def test_patch_embedding_contracts():
    """Images: float or integer (uint8 pixels are cast to the compute
    dtype, the same result as float pixels), rank 4, not empty, sides a
    multiple of `patch_size`; the same error on every backend, weights
    unchanged."""
    from kmodels.layers.patch_embedding import PatchEmbedding

    keras.utils.set_random_seed(0)
    layer = PatchEmbedding(patch_size=2, embedding_dim=3)
    pixels = np.arange(2 * 4 * 4 * 1).reshape(2, 4, 4, 1) % 7
    as_float = keras.ops.convert_to_numpy(layer(pixels.astype("float32")))
    as_uint8 = keras.ops.convert_to_numpy(layer(pixels.astype("uint8")))
    np.testing.assert_array_equal(as_uint8, as_float)
    # Independent check of one patch: a (2x2x1) patch times the kernel.
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in layer.weights)
    patch = pixels[0, :2, :2, :].astype("float64")
    expected = np.einsum("hwc,hwcd->d", patch, kernel) + bias
    np.testing.assert_allclose(as_float[0, 0], expected, rtol=1e-5)

    before = [keras.ops.convert_to_numpy(w).copy() for w in layer.weights]
    cases = [
        (
            np.ones((2, 4, 4, 1), bool),
            TypeError,
            "PatchEmbedding: inputs must be a float or integer tensor "
            "(batch, height, width, channels); got dtype bool.",
        ),
        (
            np.ones((4, 4, 1), "float32"),
            ValueError,
            "PatchEmbedding: inputs must be a 4-D tensor (batch, height, "
            "width, channels); got shape (4, 4, 1).",
        ),
        (
            np.ones((0, 4, 4, 1), "float32"),
            ValueError,
            "PatchEmbedding: inputs must not be empty (batch, height, "
            "width, channels); got shape (0, 4, 4, 1).",
        ),
        (
            np.ones((2, 5, 4, 1), "float32"),
            ValueError,
            "PatchEmbedding expects the image height to be a multiple of "
            "patch_size=2; got 5.",
        ),
    ]
    for images, exception, message in cases:
        with pytest.raises(exception) as caught:
            layer(images)
        assert str(caught.value) == message
        for old, new in zip(before, layer.weights):
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(new), old)


def test_image_models_first_compiled_steps_warn_nothing():
    """A plain functional image model (`PositionalEmbedding` around a
    `PatchEmbedding`) takes no ids: the traced call checks the images'
    static shape itself, so the first `fit` step (TensorFlow traces it
    before kmodels sees the model) and the first `predict` warn nothing
    (was: TensorFlow warned about "a bad id" for float images), and a bad
    image is refused once the model is taken over."""
    from kmodels.layers.patch_embedding import PatchEmbedding

    keras.utils.set_random_seed(1)
    images = keras.Input((None, None, 1))
    inner = PatchEmbedding(2, 4, dynamic_image_size=True)
    features = PositionalEmbedding(inner, 4)(images)
    pooled = keras.layers.GlobalAveragePooling1D()(features)
    model = keras.Model(images, keras.layers.Dense(3)(pooled))
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).random((4, 4, 4, 1)).astype("float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(x, np.array([0, 1, 2, 0]), verbose=0)
        model.predict(x, verbose=0)
    assert [str(w.message) for w in caught if "kmodels" in str(w.message)] == []
    assert np.isfinite(history.history["loss"][0])
    _refused(
        model,
        lambda: model.predict(x[:, :3], verbose=0),
        ValueError,
        "PatchEmbedding expects the image height to be a multiple of "
        "patch_size=2; got 3.",
    )


@pytest.mark.backend_independent(
    reason="reads the static shape of a symbolic tensor, no backend op"
)
def test_what_a_traced_image_call_leaves_unchecked():
    """Only an image side unknown at trace time, with patches that must
    divide it, goes unchecked; ids and tensor start indices always do."""
    from kmodels.contracts.checks import UNCHECKED_IDS
    from kmodels.layers.patch_embedding import PatchEmbedding

    layer = PatchEmbedding(2, 4, dynamic_image_size=True)
    known = keras.KerasTensor((None, 8, 8, 1))
    unknown = keras.KerasTensor((None, None, 8, 1))
    assert layer._unchecked_when_traced({"inputs": known}) is None
    assert layer._unchecked_when_traced({"inputs": unknown}) == (
        "an image whose height or width is not a multiple of the patch "
        "size is not refused (the pixels past the last whole patch are "
        "dropped)"
    )
    same = PatchEmbedding(2, 4, padding="same", dynamic_image_size=True)
    assert same._unchecked_when_traced({"inputs": unknown}) is None
    around = PositionalEmbedding(layer, 4)
    assert around._unchecked_when_traced({"inputs": known}) is None
    ids = PositionalEmbedding(keras.layers.Embedding(5, 4), 4)
    assert ids._unchecked_when_traced({"inputs": known}) == UNCHECKED_IDS
    start = keras.KerasTensor((), dtype="int32")
    assert (
        around._unchecked_when_traced({"inputs": known, "start_index": start})
        == UNCHECKED_IDS
    )
