"""Constructor arguments are checked at construction, with kmodels' names.

Each bad argument raises a `ValueError` with one exact message on every
backend, before any layer (hence any variable) is made; NumPy ints are
accepted and stored as Python ints; `Translator.set_encoder_trainable` takes
only a bool and a refused call leaves the compiled model as it was.
"""

import json
import math

import keras
import numpy as np
import pytest

import kmodels
from kmodels.layers import PatchEmbedding
from kmodels.layers import PositionalEmbedding
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import CrossAttention
from kmodels.seq2seq import Decoder
from kmodels.seq2seq import Encoder
from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_loss

np_ = keras.ops.convert_to_numpy

# Built once, never built further: a refused construction must not touch it.
EMBEDDING = keras.layers.Embedding(20, 8, name="shared_embedding")
ENCODER = Encoder(20, 4, name="shared_encoder")


def encoder(**kw):
    return Encoder(**{"vocabulary_size": 20, "units": 4, **kw})


def decoder(**kw):
    return Decoder(**{"vocabulary_size": 30, "units": 4, **kw})


def cross_attention(**kw):
    return CrossAttention(**{"units": 4, **kw})


def translator(**kw):
    args = {"context_vocabulary_size": 20, "target_vocabulary_size": 30}
    return Translator(**{**args, "units": 4, **kw})


def autoencoder(**kw):
    return Autoencoder(**{"encoder_or_vocabulary_size": 20, "units": 4, **kw})


def text_processor(**kw):
    return TextProcessor(**kw)


def positional(**kw):
    args = {"embedding": EMBEDDING, "sequence_length": 6}
    return PositionalEmbedding(**{**args, **kw})


def patches(**kw):
    return PatchEmbedding(**{"patch_size": 2, "embedding_dim": 4, **kw})


def transformer(**kw):
    args = {"embedding": EMBEDDING, "input_shape": (6,), "num_classes": 2}
    return kmodels.models.transformer_encoder(**{**args, **kw})


def _int(owner, name, got, bounds=">= 1"):
    return f"{owner}: `{name}` must be an integer {bounds}; got {got}."


TE = "transformer_encoder"
PE = "PositionalEmbedding"

CASES = [
    # The probe rows.
    (encoder, dict(units=2.5), _int("Encoder", "units", "2.5 (float)")),
    (encoder, dict(units=0), _int("Encoder", "units", "0 (int)")),
    (
        encoder,
        dict(vocabulary_size=0),
        _int("Encoder", "vocabulary_size", "0 (int)"),
    ),
    (
        translator,
        dict(context_vocabulary_size=20, target_vocabulary_size=0),
        _int("Translator", "target_vocabulary_size", "0 (int)", ">= 3"),
    ),
    (transformer, dict(num_heads=0), _int(TE, "num_heads", "0 (int)")),
    (
        positional,
        dict(position="sine", max_wavelength=-5),
        f"{PE}: `max_wavelength` must be a finite number > 0; got -5 (int).",
    ),
    # Integers: strings, bools, floats and a missing value are refused.
    (encoder, dict(units="8"), _int("Encoder", "units", "'8' (str)")),
    (encoder, dict(units=True), _int("Encoder", "units", "True (bool)")),
    (encoder, dict(units=8.0), _int("Encoder", "units", "8.0 (float)")),
    (encoder, dict(units=None), _int("Encoder", "units", "None (NoneType)")),
    (
        decoder,
        dict(vocabulary_size=np.float64(30)),
        _int("Decoder", "vocabulary_size", "np.float64(30.0) (float64)"),
    ),
    (decoder, dict(units=-1), _int("Decoder", "units", "-1 (int)")),
    (
        cross_attention,
        dict(units=0),
        _int("CrossAttention", "units", "0 (int)"),
    ),
    # Translator: sizes, ids, the encoder.
    (translator, dict(units=2.5), _int("Translator", "units", "2.5 (float)")),
    (
        translator,
        dict(context_vocabulary_size="20"),
        _int("Translator", "context_vocabulary_size", "'20' (str)"),
    ),
    (
        translator,
        dict(start_id=0),
        _int("Translator", "start_id", "0 (int)", "in [1, 29]"),
    ),
    (
        translator,
        dict(end_id=30),
        _int("Translator", "end_id", "30 (int)", "in [1, 29]"),
    ),
    (
        translator,
        dict(start_id=3, end_id=3),
        "Translator: `start_id` and `end_id` must differ; got 3 for both.",
    ),
    (
        translator,
        dict(units=None),
        "Translator: `context_vocabulary_size` and `units` are required "
        "when no `encoder` is given; got 20 and None.",
    ),
    (
        translator,
        dict(encoder="encoder"),
        "Translator: `encoder` must be a kmodels.seq2seq.Encoder (or its "
        "config) or None; got str.",
    ),
    (
        translator,
        dict(units=5, encoder=ENCODER),
        "Translator: units=5 does not match the encoder's 4.",
    ),
    # Autoencoder.
    (
        autoencoder,
        dict(encoder_or_vocabulary_size="20"),
        _int("Autoencoder", "encoder_or_vocabulary_size", "'20' (str)"),
    ),
    (autoencoder, dict(units=0), _int("Autoencoder", "units", "0 (int)")),
    (
        autoencoder,
        dict(units=None),
        "Autoencoder: a vocabulary size needs `units` (an integer >= 1); got "
        "None.",
    ),
    (
        autoencoder,
        dict(encoder_or_vocabulary_size=ENCODER, units=5),
        "Autoencoder: units=5 does not match the encoder's 4.",
    ),
    # TextProcessor.
    (
        text_processor,
        dict(max_length=2),
        _int("TextProcessor", "max_length", "2 (int)", ">= 3"),
    ),
    (
        text_processor,
        dict(max_length=8.5),
        _int("TextProcessor", "max_length", "8.5 (float)", ">= 3"),
    ),
    (
        text_processor,
        dict(keep_digits="False"),
        "TextProcessor: `keep_digits` must be True or False; got 'False' "
        "(str).",
    ),
    (
        text_processor,
        dict(split_digits=1),
        "TextProcessor: `split_digits` must be True or False; got 1 (int).",
    ),
    (
        text_processor,
        dict(punctuation=None),
        "TextProcessor: `punctuation` must be a str without whitespace; got "
        "None (NoneType).",
    ),
    (
        text_processor,
        dict(vocabulary="abc"),
        "TextProcessor: `vocabulary` must be a list of str or None; got str.",
    ),
    # PositionalEmbedding.
    (
        positional,
        dict(sequence_length=0),
        _int(PE, "sequence_length", "0 (int)"),
    ),
    (
        positional,
        dict(sequence_length=6.5),
        _int(PE, "sequence_length", "6.5 (float)"),
    ),
    (
        positional,
        dict(position="rope"),
        f"{PE}: `position` must be one of ('learned', 'sine'); got 'rope' "
        "(str).",
    ),
    (
        positional,
        dict(merge="sum"),
        f"{PE}: `merge` must be one of ('add', 'concat'); got 'sum' (str).",
    ),
    (
        positional,
        dict(max_wavelength=0),
        f"{PE}: `max_wavelength` must be a finite number > 0; got 0 (int).",
    ),
    (
        positional,
        dict(max_wavelength=math.inf),
        f"{PE}: `max_wavelength` must be a finite number > 0; got inf (float).",
    ),
    (
        positional,
        dict(max_wavelength=math.nan),
        f"{PE}: `max_wavelength` must be a finite number > 0; got nan (float).",
    ),
    (
        positional,
        dict(max_wavelength="10000"),
        f"{PE}: `max_wavelength` must be a finite number > 0; got '10000' "
        "(str).",
    ),
    # PatchEmbedding.
    (
        patches,
        dict(patch_size=0),
        _int("PatchEmbedding", "patch_size", "0 (int)"),
    ),
    (
        patches,
        dict(patch_size=True),
        _int("PatchEmbedding", "patch_size", "True (bool)"),
    ),
    (
        patches,
        dict(embedding_dim=2.5),
        _int("PatchEmbedding", "embedding_dim", "2.5 (float)"),
    ),
    # transformer_encoder.
    (
        transformer,
        dict(num_heads=9),
        f"{TE}: `num_heads` must be at most the model width 8 (each head "
        "gets width // num_heads features); got 9.",
    ),
    (transformer, dict(num_classes=0), _int(TE, "num_classes", "0 (int)")),
    (transformer, dict(num_layers=0), _int(TE, "num_layers", "0 (int)")),
    (
        transformer,
        dict(intermediate_dim=2.5),
        _int(TE, "intermediate_dim", "2.5 (float)"),
    ),
    (
        transformer,
        dict(dropout=1.0),
        f"{TE}: `dropout` must be a number in [0, 1); got 1.0 (float).",
    ),
    (
        transformer,
        dict(dropout=-0.1),
        f"{TE}: `dropout` must be a number in [0, 1); got -0.1 (float).",
    ),
    (
        transformer,
        dict(dropout=math.nan),
        f"{TE}: `dropout` must be a number in [0, 1); got nan (float).",
    ),
    (
        transformer,
        dict(dropout="0.1"),
        f"{TE}: `dropout` must be a number in [0, 1); got '0.1' (str).",
    ),
    (
        transformer,
        dict(position="rope"),
        f"{TE}: `position` must be one of ('learned', 'sine'); got 'rope' "
        "(str).",
    ),
    (
        transformer,
        dict(merge="sum"),
        f"{TE}: `merge` must be one of ('add', 'concat'); got 'sum' (str).",
    ),
    (
        transformer,
        dict(sequence_length=0),
        _int(TE, "sequence_length", "0 (int)"),
    ),
    (
        transformer,
        dict(sequence_length=5),
        f"{TE}: `sequence_length` must be at least the 6 positions of "
        "input_shape (6,); got 5.",
    ),
    (
        transformer,
        dict(input_shape=(0,)),
        _int(TE, "input_shape[0]", "0 (int)"),
    ),
    (
        transformer,
        dict(input_shape="6"),
        f"{TE}: `input_shape` must be a non-empty tuple, e.g. (seq,) or "
        "(height, width, channels); got '6'.",
    ),
]


def _case_id(case):
    factory, kwargs, _ = case
    return f"{factory.__name__}-" + "-".join(
        f"{k}={v!r}"[:30] for k, v in kwargs.items()
    )


@pytest.fixture
def layers_made(monkeypatch):
    """Counts `keras.layers.Layer.__init__` calls (every layer, model and
    sublayer runs it before it can hold a variable)."""
    made = []
    original = keras.layers.Layer.__init__

    def counting(self, *args, **kwargs):
        made.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(keras.layers.Layer, "__init__", counting)
    return made


@pytest.mark.parametrize(
    "factory, kwargs, message", CASES, ids=[_case_id(c) for c in CASES]
)
def test_bad_argument_is_refused_before_anything_is_made(
    factory, kwargs, message, layers_made
):
    with pytest.raises(ValueError) as info:
        factory(**kwargs)
    assert str(info.value) == message
    assert layers_made == []
    assert not EMBEDDING.built and not ENCODER.built


def test_numpy_integers_are_accepted_and_stored_as_python_ints():
    translator = Translator(
        np.int64(20),
        np.int32(30),
        np.int64(8),
        start_id=np.int64(2),
        end_id=np.int16(3),
    )
    config = translator.get_config()
    for name in (
        "context_vocabulary_size",
        "target_vocabulary_size",
        "units",
        "start_id",
        "end_id",
    ):
        assert type(getattr(translator, name)) is int, name
        assert type(config[name]) is int, name
    assert (translator.units, translator.start_id, translator.end_id) == (
        8,
        2,
        3,
    )
    # A config goes through JSON and back: `encoder` arrives as a dict.
    restored = Translator.from_config(json.loads(json.dumps(config)))
    assert restored.get_config() == config
    assert type(restored.encoder) is Encoder

    auto = Autoencoder(np.int64(20), np.int64(8))
    assert type(auto.units) is int and type(auto.vocabulary_size) is int
    config = json.loads(json.dumps(auto.get_config()))
    assert Autoencoder.from_config(config).get_config() == auto.get_config()

    for layer in (
        Decoder(np.int64(30), np.int64(8)),
        CrossAttention(np.int64(8)),
    ):
        assert type(layer.units) is int
        json.dumps(layer.get_config())

    patch = PatchEmbedding(np.int64(2), np.int64(4))
    assert (type(patch.patch_size), type(patch.embedding_dim)) == (int, int)

    text = TextProcessor(np.int64(8), keep_digits=np.bool_(True))
    assert type(text.max_length) is int and text.keep_digits is True

    layer = PositionalEmbedding(
        keras.layers.Embedding(20, 8),
        np.int64(6),
        position="sine",
        max_wavelength=np.float32(100.0),
    )
    assert type(layer.sequence_length) is int
    assert layer.max_wavelength == 100 and type(layer.max_wavelength) is int
    assert layer.get_config()["max_wavelength"] == 100
    default = PositionalEmbedding(keras.layers.Embedding(20, 8), 6)
    assert default.get_config()["max_wavelength"] == 10000


def test_transformer_encoder_takes_numpy_ints_and_width_rule():
    """`num_heads` may exceed the embedding width when `merge="concat"`
    doubles it (keras-hub needs width // num_heads >= 1, no divisor)."""
    model = kmodels.models.transformer_encoder(
        keras.layers.Embedding(20, 8),
        (np.int64(6),),
        num_classes=np.int64(3),
        num_heads=np.int64(9),
        intermediate_dim=np.int64(8),
        merge="concat",
        dropout=np.float32(0.0),
    )
    block = model.get_layer("encoder_0")
    assert type(block.num_heads) is int and block.num_heads == 9
    assert type(block.intermediate_dim) is int
    assert tuple(model.output.shape) == (None, 3)
    json.dumps(model.get_config())


def _frozen_state(model):
    return [np_(v).copy() for v in model.variables] + [
        np_(v).copy() for v in model.optimizer.variables
    ]


def test_set_encoder_trainable_refuses_non_bools_and_changes_nothing():
    keras.utils.set_random_seed(0)
    model = Translator(20, 12, 4, start_id=2, end_id=3)
    model.compile(optimizer="adam", loss=masked_loss)
    rng = np.random.default_rng(0)
    context = rng.integers(1, 20, (4, 5)).astype("int32")
    target = rng.integers(2, 12, (4, 4)).astype("int32")
    model.fit((context, target[:, :-1]), target[:, 1:], epochs=1, verbose=0)
    optimizer = model.optimizer
    before = _frozen_state(model)
    trainable_before = len(model.trainable_variables)
    for bad, shown in (
        ("False", "'False' (str)"),
        (0, "0 (int)"),
        (None, "None (NoneType)"),
    ):
        with pytest.raises(ValueError) as info:
            model.set_encoder_trainable(bad)
        assert str(info.value) == (
            "Translator.set_encoder_trainable: `trainable` must be True or "
            f"False; got {shown}."
        )
    assert model.encoder.trainable is True
    assert model.optimizer is optimizer  # not recompiled
    assert len(model.trainable_variables) == trainable_before
    after = _frozen_state(model)
    assert len(after) == len(before)
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)
    # The compiled step still trains the encoder.
    encoder_before = [np_(w).copy() for w in model.encoder.weights]
    model.fit((context, target[:, :-1]), target[:, 1:], epochs=1, verbose=0)
    changed = [
        np.abs(np_(w) - b).max() > 0
        for w, b in zip(model.encoder.weights, encoder_before)
    ]
    assert all(changed)
    # A NumPy bool is a bool: it freezes the encoder.
    model.set_encoder_trainable(np.bool_(False))
    assert model.encoder.trainable is False
    assert model.optimizer is not optimizer


@pytest.mark.parametrize(
    "start_index, message",
    [
        (-1, f"{PE}: `start_index` must be an integer >= 0; got -1 (int)."),
        (
            2.5,
            f"{PE}: `start_index` must be an integer >= 0; got 2.5 (float).",
        ),
        (
            4,
            f"{PE} holds 6 positions (`sequence_length`); the inputs need "
            "positions 4 to 6 (start_index=4, 3 positions).",
        ),
    ],
)
def test_start_index_is_checked_at_call(start_index, message):
    """JAX's slice would clamp 4 to 3 silently; torch would take 2.5."""
    layer = PositionalEmbedding(keras.layers.Embedding(20, 8), 6)
    ids = np.array([[1, 2, 3]], "int32")
    with pytest.raises(ValueError) as info:
        layer(ids, start_index=start_index)
    assert message in str(info.value)


def test_valid_start_index_matches_numpy():
    keras.utils.set_random_seed(1)
    layer = PositionalEmbedding(keras.layers.Embedding(20, 8), 6)
    ids = np.array([[1, 2, 3]], "int32")
    out = np_(layer(ids, start_index=np.int64(3)))
    table = np_(layer.embedding.embeddings)
    positions = np_(layer.position_embedding.position_embeddings)
    expected = table[ids] + positions[3:6][None]
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6)
