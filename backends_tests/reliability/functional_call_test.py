"""Functional (symbolic) calls return what eager calls return.

Keras builds a functional model's outputs from `compute_output_spec`; the
default one passes only tensor shapes to `compute_output_shape`, so a
`Decoder(..., return_state=True)` or a `CrossAttention(...,
return_attention_weights=True)` used to give one tensor where the eager call
gives a tuple. These tests build functional models with the flags on and
check the symbolic structure, shapes and dtypes, the `predict` and direct
outputs against the eager layer call (the reference: the eager path is
checked against NumPy oracles in `backends_tests/seq2seq/`), and a `.keras`
round trip.
"""

import keras
import numpy as np
import pytest

from kmodels.seq2seq import CrossAttention
from kmodels.seq2seq import Decoder

VOCAB = 20
UNITS = 8
BATCH = 3
T = 4
S = 5
ATOL = 1e-6


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _decoder_data(rng):
    context = rng.normal(size=(BATCH, S, UNITS)).astype("float32")
    # Right-padded target ids and context masks of different lengths.
    x = np.array([[2, 5, 7, 9], [2, 11, 0, 0], [2, 0, 0, 0]], "int32")
    context_mask = np.arange(S)[None, :] < np.array([[5], [3], [1]])
    state = rng.normal(size=(BATCH, UNITS)).astype("float32")
    return context, x, context_mask, state


def _decoder_model(return_state, return_weights):
    context = keras.Input((S, UNITS), name="context")
    x = keras.Input((T,), dtype="int32", name="x")
    mask = keras.Input((S,), dtype="bool", name="context_mask")
    state = keras.Input((UNITS,), name="state")
    decoder = Decoder(VOCAB, UNITS, name="decoder")
    outputs = decoder(
        context,
        x,
        state=state,
        context_mask=mask,
        return_state=return_state,
        return_attention_weights=return_weights,
    )
    model = keras.Model([context, x, mask, state], outputs)
    return model, decoder


FLAGS = [(True, True), (True, False), (False, True), (False, False)]


def _expected_shapes(return_state, return_weights):
    shapes = [(None, T, VOCAB)]
    if return_state:
        shapes.append((None, UNITS))
    if return_weights:
        shapes.append((None, T, S))
    return shapes


@pytest.mark.parametrize("return_state,return_weights", FLAGS)
def test_decoder_symbolic_outputs_follow_flags(return_state, return_weights):
    model, _ = _decoder_model(return_state, return_weights)
    shapes = _expected_shapes(return_state, return_weights)
    outputs = model.outputs
    assert [tuple(o.shape) for o in outputs] == shapes
    assert [o.dtype for o in outputs] == ["float32"] * len(shapes)


def test_decoder_compute_output_shape_takes_flags():
    decoder = Decoder(VOCAB, UNITS)
    context_shape, x_shape = (2, S, UNITS), (2, T)
    assert decoder.compute_output_shape(context_shape, x_shape) == (
        2,
        T,
        VOCAB,
    )
    assert decoder.compute_output_shape(
        context_shape,
        x_shape,
        return_state=True,
        return_attention_weights=True,
    ) == ((2, T, VOCAB), (2, UNITS), (2, T, S))


@pytest.mark.parametrize("return_state,return_weights", FLAGS)
def test_decoder_functional_matches_eager(rng, return_state, return_weights):
    model, decoder = _decoder_model(return_state, return_weights)
    context, x, context_mask, state = _decoder_data(rng)
    eager = decoder(
        context,
        x,
        state=state,
        context_mask=context_mask,
        return_state=return_state,
        return_attention_weights=return_weights,
    )
    eager = [eager] if not isinstance(eager, tuple) else list(eager)
    inputs = [context, x, context_mask, state]
    direct = model(inputs)
    predicted = model.predict(inputs, batch_size=BATCH, verbose=0)
    direct = [direct] if not isinstance(direct, (list, tuple)) else direct
    if not isinstance(predicted, (list, tuple)):
        predicted = [predicted]
    shapes = _expected_shapes(return_state, return_weights)
    assert len(eager) == len(direct) == len(predicted) == len(shapes)
    for e, d, p, shape in zip(eager, direct, predicted, shapes):
        assert tuple(e.shape) == (BATCH,) + shape[1:]
        assert keras.backend.standardize_dtype(d.dtype) == "float32"
        np.testing.assert_allclose(_np(d), _np(e), atol=ATOL, rtol=0)
        np.testing.assert_allclose(p, _np(e), atol=ATOL, rtol=0)
    if return_weights:
        weights = _np(eager[-1])
        # Padded context positions get no attention; rows sum to 1.
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        padded = ~np.broadcast_to(context_mask[:, None], weights.shape)
        assert np.all(weights[padded] == 0)


def test_decoder_functional_save_load_round_trip(rng, tmp_path):
    model, _ = _decoder_model(True, True)
    inputs = list(_decoder_data(rng))
    before = model.predict(inputs, batch_size=BATCH, verbose=0)
    path = str(tmp_path / "decoder_functional.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    after = loaded.predict(inputs, batch_size=BATCH, verbose=0)
    assert len(before) == len(after) == 3
    assert [tuple(o.shape) for o in loaded.outputs] == _expected_shapes(
        True, True
    )
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=0)


def _attention_model(return_weights):
    x = keras.Input((T, UNITS), name="x")
    context = keras.Input((S, UNITS), name="context")
    mask = keras.Input((S,), dtype="bool", name="context_mask")
    layer = CrossAttention(UNITS, name="attention")
    outputs = layer(
        x,
        context,
        context_mask=mask,
        return_attention_weights=return_weights,
    )
    return keras.Model([x, context, mask], outputs), layer


def _attention_data(rng):
    x = rng.normal(size=(BATCH, T, UNITS)).astype("float32")
    context = rng.normal(size=(BATCH, S, UNITS)).astype("float32")
    mask = np.arange(S)[None, :] < np.array([[5], [3], [1]])
    return [x, context, mask]


@pytest.mark.parametrize("return_weights", [True, False])
def test_cross_attention_functional_matches_eager(rng, return_weights):
    model, layer = _attention_model(return_weights)
    shapes = [(None, T, UNITS)] + ([(None, T, S)] if return_weights else [])
    assert [tuple(o.shape) for o in model.outputs] == shapes
    assert [o.dtype for o in model.outputs] == ["float32"] * len(shapes)
    x, context, mask = _attention_data(rng)
    eager = layer(
        x, context, context_mask=mask, return_attention_weights=return_weights
    )
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    direct = model([x, context, mask])
    direct = list(direct) if isinstance(direct, (list, tuple)) else [direct]
    predicted = model.predict([x, context, mask], batch_size=BATCH, verbose=0)
    if not isinstance(predicted, (list, tuple)):
        predicted = [predicted]
    assert len(eager) == len(direct) == len(predicted) == len(shapes)
    for e, d, p in zip(eager, direct, predicted):
        np.testing.assert_allclose(_np(d), _np(e), atol=ATOL, rtol=0)
        np.testing.assert_allclose(p, _np(e), atol=ATOL, rtol=0)


def test_cross_attention_compute_output_shape_takes_flag():
    layer = CrossAttention(UNITS)
    assert layer.compute_output_shape((2, T, UNITS), (2, S, 6)) == (
        2,
        T,
        UNITS,
    )
    assert layer.compute_output_shape(
        (2, T, UNITS), (2, S, 6), return_attention_weights=True
    ) == ((2, T, UNITS), (2, T, S))


def test_cross_attention_functional_save_load_round_trip(rng, tmp_path):
    model, _ = _attention_model(True)
    inputs = _attention_data(rng)
    before = model.predict(inputs, batch_size=BATCH, verbose=0)
    path = str(tmp_path / "attention_functional.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    after = loaded.predict(inputs, batch_size=BATCH, verbose=0)
    assert len(before) == len(after) == 2
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=0)


def test_decoder_state_feeds_next_functional_step(rng):
    """The documented use: `logits, state = Decoder(...)(..., return_state=
    True)` in a functional model, the state fed to a second step."""
    context = keras.Input((S, UNITS))
    first = keras.Input((T,), dtype="int32")
    second = keras.Input((T,), dtype="int32")
    decoder = Decoder(VOCAB, UNITS)
    logits, state = decoder(context, first, return_state=True)
    logits2 = decoder(context, second, state=state)
    model = keras.Model([context, first, second], [logits, logits2])
    c, x, _, _ = _decoder_data(rng)
    x2 = np.array([[4, 6, 0, 0], [8, 0, 0, 0], [3, 1, 2, 0]], "int32")
    got = model.predict([c, x, x2], batch_size=BATCH, verbose=0)
    want_logits, want_state = decoder(c, x, return_state=True)
    want2 = decoder(c, x2, state=want_state)
    np.testing.assert_allclose(got[0], _np(want_logits), atol=ATOL, rtol=0)
    np.testing.assert_allclose(got[1], _np(want2), atol=ATOL, rtol=0)


def test_symbolic_translator_call_on_a_tuple_warns_nothing():
    # A Translator's inputs are one tuple `(context, target)`: a symbolic
    # call on a tuple of KerasTensors builds a graph and must neither check
    # nor warn "runs inside a compiled step whose inputs kmodels did not
    # check" (it did: the guard looked at the tuple, not its contents).
    import warnings

    from kmodels.seq2seq import Translator

    model = Translator(
        context_vocabulary_size=11, target_vocabulary_size=13, units=8
    )
    inputs = (
        keras.KerasTensor((2, 5), dtype="int32"),
        keras.KerasTensor((2, 4), dtype="int32"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model(inputs)
    assert [str(w.message) for w in caught if "kmodels" in str(w.message)] == []
    assert tuple(out.shape) == (2, 4, 13)
