"""Eager calls of the seq2seq classes run compiled, once traced per input
signature (`kmodels.seq2seq.eager_cache`), on TensorFlow and JAX; torch
runs them uncompiled. Same outputs, masks, errors and gradients as the
uncompiled call.
"""

import gc
import re
import warnings
import weakref

import keras
import numpy as np
import pytest
from keras.src.backend import get_keras_mask

from kmodels.backend import compiled
from kmodels.backend.compiled import compile_reader
from kmodels.contracts.checks import checked
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import CrossAttention
from kmodels.seq2seq import Encoder
from kmodels.seq2seq import Translator
from kmodels.seq2seq import eager_cache
from kmodels.testing.gradients import loss_gradients

np_ = keras.ops.convert_to_numpy

VOCAB_C, VOCAB_T, UNITS = 9, 7, 4
# A compiled graph may fuse float32 ops differently from the op-by-op
# eager call: measured <= 1.2e-7 on every backend.
RTOL, ATOL = 1e-5, 1e-6


def _ids(rng, shape, vocab, pad_rows=((1, 3), (2, 1))):
    ids = rng.integers(1, vocab, shape).astype("int32")
    for row, start in pad_rows:
        if row < shape[0]:
            ids[row, start:] = 0
    return ids


def _compiles():
    """Whether this backend compiles an eager call on concrete tensors
    (False on torch): the backend's own answer."""
    return compiled.may_compile_eager_call(
        [keras.ops.convert_to_tensor(np.zeros((1,), "float32"))]
    )


def _expected_traces(n):
    return n if _compiles() else 0


def _randomize(layer, rng, scale=0.5):
    layer.set_weights(
        [
            rng.uniform(-scale, scale, tuple(w.shape)).astype("float32")
            for w in layer.weights
        ]
    )


def _uncached(fn):
    with eager_cache.disabled():
        return fn()


def _assert_close(actual, expected):
    for a, e in zip(keras.tree.flatten(actual), keras.tree.flatten(expected)):
        np.testing.assert_allclose(np_(a), np_(e), rtol=RTOL, atol=ATOL)


def _translator(rng):
    ctx = _ids(rng, (3, 5), VOCAB_C)
    tin = _ids(rng, (3, 4), VOCAB_T, ((0, 2), (2, 3)))
    model = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=2, end_id=3)
    model.build((ctx.shape, tin.shape))
    _randomize(model, rng)
    return model, ctx, tin


# ------------------------------------------------ same outputs as before
def test_translator_cached_equals_uncached_and_predict(rng):
    model, ctx, tin = _translator(rng)
    cached = [np_(model((ctx, tin))) for _ in range(3)]
    uncached = np_(_uncached(lambda: model((ctx, tin))))
    predicted = model.predict_on_batch((ctx, tin))
    assert eager_cache.trace_count(model) == _expected_traces(1)
    for out in cached:
        np.testing.assert_allclose(out, uncached, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(out, predicted, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(cached[1], cached[0])


def test_autoencoder_cached_equals_uncached_and_predict(rng):
    tokens = _ids(rng, (3, 5), VOCAB_C)
    model = Autoencoder(VOCAB_C, units=UNITS)
    model.build(tokens.shape)
    _randomize(model, rng)
    cached = np_(model(tokens))
    cached_again = np_(model(tokens))
    uncached = np_(_uncached(lambda: model(tokens)))
    np.testing.assert_array_equal(cached_again, cached)
    np.testing.assert_allclose(cached, uncached, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(
        cached, model.predict_on_batch(tokens), rtol=RTOL, atol=ATOL
    )
    assert eager_cache.trace_count(model) == _expected_traces(1)


def test_encoder_output_and_its_mask(rng):
    model, ctx, _ = _translator(rng)
    encoder = model.encoder
    first = encoder(ctx)
    second = encoder(ctx)
    uncached = _uncached(lambda: encoder(ctx))
    # The inputs were checked above: the compiled reference does not warn.
    with checked():
        reference = compile_reader(lambda x: encoder(x), encoder.variables)(
            keras.ops.convert_to_tensor(ctx)
        )
    _assert_close(second, uncached)
    _assert_close(second, reference)
    for out in (first, second, uncached):
        np.testing.assert_array_equal(np_(get_keras_mask(out)), ctx != 0)
    assert eager_cache.trace_count(encoder) == _expected_traces(1)


def test_decoder_flags_and_state(rng):
    model, ctx, tin = _translator(rng)
    decoder = model.decoder
    context = np_(model.encoder(ctx))
    state = rng.normal(size=(3, UNITS)).astype("float32")
    calls = [
        lambda: decoder(context, tin, context_mask=ctx != 0),
        lambda: decoder(
            context,
            tin,
            state=state,
            context_mask=ctx != 0,
            return_state=True,
            return_attention_weights=True,
        ),
        lambda: decoder(context, tin, return_state=True),
    ]
    for call in calls:
        cached, again = call(), call()
        uncached = _uncached(call)
        assert type(cached) is type(uncached)
        assert len(keras.tree.flatten(cached)) == len(
            keras.tree.flatten(uncached)
        )
        _assert_close(cached, uncached)
        _assert_close(again, cached)
    # One trace per flag combination, none for the repeated calls.
    assert eager_cache.trace_count(decoder) == _expected_traces(3)


def test_cross_attention_weights(rng):
    layer = CrossAttention(UNITS)
    x = rng.normal(size=(2, 3, UNITS)).astype("float32")
    context = rng.normal(size=(2, 5, UNITS)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    layer.build(x.shape, context.shape)
    _randomize(layer, rng)

    def call():
        return layer(
            x, context, context_mask=mask, return_attention_weights=True
        )

    (y, w), (y2, w2) = call(), call()
    y0, w0 = _uncached(call)
    _assert_close((y, w), (y0, w0))
    _assert_close((y2, w2), (y0, w0))
    # Padded context positions get zero attention.
    np.testing.assert_array_equal(np_(w)[0, :, 3:], 0.0)
    assert eager_cache.trace_count(layer) == _expected_traces(1)


def test_context_mask_from_encoder_metadata_on_repeated_calls(rng):
    model, ctx, tin = _translator(rng)
    context = model.encoder(ctx)
    explicit = np_(
        _uncached(lambda: model.decoder(context, tin, context_mask=ctx != 0))
    )
    # The mask travels on the context tensor into the compiled call.
    for _ in range(3):
        _assert_close(model.decoder(context, tin), explicit)
    unmasked = np_(
        _uncached(lambda: model.decoder(context, tin, context_mask=ctx > -1))
    )
    assert np.abs(unmasked - explicit).max() > 1e-3


# ------------------------------------------------------------ signatures
def test_one_trace_per_signature(rng):
    model, ctx, tin = _translator(rng)
    longer = (_ids(rng, (3, 7), VOCAB_C), _ids(rng, (3, 2), VOCAB_T, ()))
    for _ in range(3):
        model((ctx, tin))
    assert eager_cache.trace_count(model) == _expected_traces(1)
    model(longer)
    model(longer)
    model((ctx, tin))
    assert eager_cache.trace_count(model) == _expected_traces(2)
    # An int64 NumPy batch is another signature on TensorFlow, the same
    # int32 one on JAX (no 64-bit integers there).
    model((ctx.astype("int64"), tin.astype("int64")))
    model((ctx.astype("int64"), tin.astype("int64")))
    assert eager_cache.trace_count(model) <= _expected_traces(3)


def test_the_least_recently_used_signature_is_dropped(rng, monkeypatch):
    monkeypatch.setattr(eager_cache, "MAX_SIGNATURES", 2)
    encoder = Encoder(VOCAB_C, UNITS)
    for length in (3, 4, 5, 3):
        encoder(_ids(rng, (2, length), VOCAB_C, ()))
    # 3 (the first call builds the layer symbolically, then traces), 4, 5,
    # and 3 again (dropped by 5).
    assert eager_cache.trace_count(encoder) == _expected_traces(4)
    assert eager_cache.signature_count(encoder) == min(2, _expected_traces(4))


def test_the_first_call_builds_symbolically_then_runs_compiled(rng):
    encoder = Encoder(VOCAB_C, UNITS)
    tokens = _ids(rng, (2, 4), VOCAB_C, ())
    first = np_(encoder(tokens))
    # One trace, by the first call: it did not run uncompiled.
    assert encoder.built
    assert eager_cache.trace_count(encoder) == _expected_traces(1)
    np.testing.assert_allclose(
        first, np_(_uncached(lambda: encoder(tokens))), rtol=RTOL, atol=ATOL
    )


def test_no_compiled_call_inside_someone_elses_trace(rng):
    model, ctx, tin = _translator(rng)
    inputs = (
        keras.ops.convert_to_tensor(ctx),
        keras.ops.convert_to_tensor(tin),
    )
    traced = compile_reader(lambda c, t: model((c, t)), model.variables)
    # A traced call is not compiled on its own. (It warns that kmodels did
    # not check its inputs, except on torch, where compile_reader is eager:
    # the contract tests pin that warning.)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = np_(traced(*inputs))
    np.testing.assert_allclose(
        out,
        np_(_uncached(lambda: model((ctx, tin)))),
        rtol=RTOL,
        atol=ATOL,
    )
    values = [v.value for v in model.trainable_variables]
    others = [v.value for v in model.non_trainable_variables]
    model.stateless_call(values, others, (ctx, tin))
    model.predict((ctx, tin), verbose=0)
    # Neither the model nor its sublayers compiled a call of their own.
    for layer in (model, model.encoder, model.decoder):
        assert eager_cache.trace_count(layer) == 0


def test_switch_off_runs_uncompiled(rng):
    model, ctx, tin = _translator(rng)
    with eager_cache.disabled():
        model((ctx, tin))
        model.encoder(ctx)
    assert eager_cache.ENABLED
    assert eager_cache.trace_count(model) == 0
    assert eager_cache.trace_count(model.encoder) == 0


# --------------------------------------------------------------- weights
def test_set_weights_and_fit_are_seen_without_retracing(rng):
    model, ctx, tin = _translator(rng)
    tout = np.roll(tin, -1, axis=1)
    model((ctx, tin))
    _randomize(model, rng)
    _assert_close(model((ctx, tin)), _uncached(lambda: model((ctx, tin))))
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    before = np_(model((ctx, tin)))
    model.fit((ctx, tin), tout, epochs=2, verbose=0)
    after = np_(model((ctx, tin)))
    assert np.abs(after - before).max() > 1e-3
    _assert_close(after, model.predict_on_batch((ctx, tin)))
    # Freezing changes nothing at inference.
    model.encoder.trainable = False
    _assert_close(model((ctx, tin)), after)
    assert eager_cache.trace_count(model) == _expected_traces(1)


# ------------------------------------------------------------- contracts
def test_contract_errors_are_unchanged(rng):
    model, ctx, tin = _translator(rng)
    model((ctx, tin))
    bad = ctx.copy()
    bad[0, 0] = VOCAB_C
    message = re.escape(
        f"Translator: context_tokens must lie in [0, {VOCAB_C}) "
        f"(vocabulary_size={VOCAB_C}); got values [{VOCAB_C}]"
    )
    with pytest.raises(ValueError, match=message):
        model((bad, tin))
    with eager_cache.disabled(), pytest.raises(ValueError, match=message):
        model((bad, tin))
    with pytest.raises(ValueError, match="Encoder: tokens must lie in"):
        model.encoder(bad)
    assert eager_cache.trace_count(model) == _expected_traces(1)


# ------------------------------------------------------------- gradients
def test_gradients_through_an_eager_call_are_unchanged(rng):
    model, ctx, tin = _translator(rng)
    tout = np.roll(tin, -1, axis=1)
    allowed = []

    def loss_fn():
        allowed.append(
            compiled.may_compile_eager_call([keras.ops.convert_to_tensor(ctx)])
        )
        logits = model((ctx, tin))
        return keras.ops.mean(
            keras.losses.sparse_categorical_crossentropy(
                tout, logits, from_logits=True
            )
        )

    before = eager_cache.trace_count(model)
    loss, grads = loss_gradients(model, loss_fn)
    # Under tf.GradientTape the compiled call runs (and is differentiated);
    # JAX's gradients trace the call; torch's autograd runs it eagerly.
    compiled_under_autodiff = any(allowed)
    assert eager_cache.trace_count(model) - before == int(
        compiled_under_autodiff
    )
    loss0, grads0 = _uncached(lambda: loss_gradients(model, loss_fn))
    np.testing.assert_allclose(np_(loss), np_(loss0), rtol=1e-6)
    assert len(grads) == len(model.trainable_variables) == len(grads0)
    for g, g0 in zip(grads, grads0):
        np.testing.assert_allclose(g, g0, rtol=RTOL, atol=ATOL)
    assert sum(float(np.abs(g).sum()) > 0 for g in grads) >= len(grads) - 2


# ---------------------------------------------------------------- memory
def _rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS in /proc/self/status")


def test_resident_memory_is_flat_over_eager_calls(rng):
    encoder = Encoder(VOCAB_C, UNITS)
    tokens = _ids(rng, (2, 6), VOCAB_C)
    for _ in range(30):
        np_(encoder(tokens))
    start = _rss_mb()
    for _ in range(300):
        np_(encoder(tokens))
    # Uncompiled on JAX, each call grew it by ~6 MB (a Translator).
    assert _rss_mb() - start < 20.0


def test_a_layer_is_freed_with_its_compiled_calls(rng):
    encoder = Encoder(VOCAB_C, UNITS)
    tokens = _ids(rng, (2, 6), VOCAB_C)
    encoder(tokens)
    encoder(tokens)
    assert eager_cache.signature_count(encoder) == _expected_traces(1)
    freed = weakref.ref(encoder)
    del encoder
    gc.collect()
    assert freed() is None
