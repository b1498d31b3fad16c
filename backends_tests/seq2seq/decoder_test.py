"""Decoder against the oracle and against the original tutorial's classes.

The tutorial's Encoder/CrossAttention/Decoder (seed 000, TensorFlow "NMT with
attention", written for tf.keras 2) come from `benchmarks.tutorial` and run
under `tf_keras` in the same process, whatever the Keras 3 backend:
`tf_keras` imports TensorFlow, which is installed in every test
environment, and never touches Keras 3.
"""

import keras
import numpy as np
import pytest

from benchmarks.tutorial import tutorial_classes
from kmodels.backend.compiled import compile_reader
from kmodels.seq2seq import Decoder
from kmodels.seq2seq import Encoder
from kmodels.testing import oracle
from kmodels.testing.layer_contract import run_layer_test

np_ = keras.ops.convert_to_numpy

# float32 vs the float64 oracle through a GRU, a softmax and a LayerNorm of
# O(1) values: measured errors ~2e-7.
RTOL, ATOL = 1e-5, 1e-6
# Same float32 arithmetic in two libraries (different kernels and summation
# order): measured ~5e-7 on every backend.
TUTORIAL_ATOL = 1e-5

VOCAB_C, VOCAB_T, UNITS = 9, 7, 4


def _inputs(rng):
    context_tokens = rng.integers(1, VOCAB_C, (3, 5)).astype("int32")
    context_tokens[1, 3:] = 0
    context_tokens[2, 1:] = 0
    target = rng.integers(1, VOCAB_T, (3, 4)).astype("int32")
    target[0, 2:] = 0
    target[2, 3:] = 0
    return context_tokens, target


def _built(rng, randomize):
    context_tokens, target = _inputs(rng)
    encoder = Encoder(VOCAB_C, UNITS)
    encoder.build(context_tokens.shape)
    enc_w = randomize(encoder)
    decoder = Decoder(VOCAB_T, UNITS)
    decoder.build(context_tokens.shape + (UNITS,), target.shape)
    dec_w = randomize(decoder)
    return encoder, decoder, enc_w, dec_w, context_tokens, target


def test_logits_state_and_attention_match_oracle(rng, randomize, parity):
    encoder, decoder, enc_w, dec_w, ctx, target = _built(rng, randomize)
    h0 = rng.normal(size=(3, UNITS)).astype("float32")
    context = encoder(ctx)
    logits, state, weights = decoder(
        context,
        target,
        state=h0,
        context_mask=ctx != 0,
        return_state=True,
        return_attention_weights=True,
    )
    ref_context = oracle.seq2seq_encoder(ctx, enc_w)
    ref_logits, ref_state, ref_weights = oracle.seq2seq_decoder(
        ref_context, ctx != 0, target, dec_w, state=h0
    )
    np.testing.assert_allclose(np_(logits), ref_logits, RTOL, ATOL)
    np.testing.assert_allclose(np_(state), ref_state, RTOL, ATOL)
    np.testing.assert_allclose(np_(weights), ref_weights, RTOL, ATOL)
    # The state of a padded row is its state after its last real token.
    short = oracle.seq2seq_decoder(
        ref_context[:1], ctx[:1] != 0, target[:1, :2], dec_w, state=h0[:1]
    )[1]
    np.testing.assert_allclose(np_(state)[:1], short, RTOL, ATOL)
    parity.record("seq2seq/decoder_logits", np_(logits), ATOL, RTOL)
    parity.record("seq2seq/decoder_state", np_(state), ATOL, RTOL)


def test_right_padded_path_matches_the_oracle(rng, randomize):
    # The decoder's other GRU path (Keras' unmasked GRU on right-padded
    # rows: torch on CUDA, where `kmodels.seq2seq.gru` is not used), called
    # directly on every backend: outputs (a padded step repeats the last
    # real output) and final state equal the oracle's masked GRU.
    _, decoder, _, dec_w, _, target = _built(rng, randomize)
    h0 = rng.normal(size=(3, UNITS)).astype("float32")
    h = decoder.embedding(target)
    seq, state = decoder._right_padded_rnn(
        keras.ops.convert_to_tensor(np_(h)),
        keras.ops.convert_to_tensor(h0),
        keras.ops.convert_to_tensor(target != 0),
    )
    kernel, recurrent, bias = dec_w[1:4]
    ref_seq, ref_state = oracle.gru(
        np_(h), kernel, recurrent, bias, mask=target != 0, initial_state=h0
    )
    np.testing.assert_allclose(np_(seq), ref_seq, RTOL, ATOL)
    np.testing.assert_allclose(np_(state), ref_state, RTOL, ATOL)


def test_context_mask_from_encoder_metadata_on_repeated_calls(rng, randomize):
    encoder, decoder, _, _, ctx, target = _built(rng, randomize)
    context = encoder(ctx)
    explicit = np_(decoder(context, target, context_mask=ctx != 0))
    # The mask travels on the context tensor; a second and third call with
    # the same tensor must still mask (a literal Keras 3 port lost it).
    for _ in range(3):
        np.testing.assert_array_equal(np_(decoder(context, target)), explicit)


def test_compiled_call_matches_eager(rng, randomize):
    encoder, decoder, _, _, ctx, target = _built(rng, randomize)
    eager = np_(decoder(encoder(ctx), target, context_mask=ctx != 0))

    def run(c, t):
        return decoder(encoder(c), t, context_mask=keras.ops.not_equal(c, 0))

    compiled = compile_reader(run, encoder.variables + decoder.variables)
    out = np_(compiled(*map(keras.ops.convert_to_tensor, (ctx, target))))
    # Compiled graphs may fuse ops differently: float32 rounding only.
    np.testing.assert_allclose(out, eager, rtol=1e-5, atol=1e-6)


def test_step_by_step_equals_whole_sequence(rng, randomize):
    encoder, decoder, _, _, ctx, target = _built(rng, randomize)
    context = encoder(ctx)
    whole = np_(decoder(context, target, context_mask=ctx != 0))
    state = None
    for t in range(target.shape[1]):
        step, state = decoder(
            context,
            target[:, t : t + 1],
            state=state,
            context_mask=ctx != 0,
            return_state=True,
        )
        real = target[:, t] != 0
        np.testing.assert_allclose(
            np_(step)[real, 0], whole[real, t], rtol=1e-5, atol=1e-6
        )


def test_layer_contract(rng):
    ctx, target = _inputs(rng)
    context = rng.normal(size=ctx.shape + (UNITS,)).astype("float32")
    state = rng.normal(size=(3, UNITS)).astype("float32")
    decoder = run_layer_test(
        Decoder,
        dict(vocabulary_size=VOCAB_T, units=UNITS),
        input_data=dict(
            context=context, x=target, state=state, context_mask=ctx != 0
        ),
        call_kwargs=dict(return_state=True, return_attention_weights=True),
        expected_output_shape=((3, 4, VOCAB_T), (3, UNITS), (3, 4, 5)),
        expected_output_dtype="float32",
        # Embedding, GRU (3), CrossAttention (10), Dense (2).
        expected_num_trainable_weights=16,
        expected_num_non_trainable_weights=0,
        supports_masking=True,
        expected_mask=False,
        # Same weights, same GRU kernels: identical outputs after a .keras
        # round trip.
        tolerance=0,
    )
    # Without the flags: the logits only.
    assert decoder.compute_output_shape((2, 5, UNITS), (2, 3)) == (
        2,
        3,
        VOCAB_T,
    )


def _tutorial_layers(vocab_c, vocab_t, units):
    """The tutorial's Encoder and Decoder as in seed 000, from their one
    home, `benchmarks.tutorial` (the benchmark times the same classes).
    Vocabulary sizes are given as integers: the tutorial's
    `TextVectorization`/`StringLookup` processors hold no weights, so the
    weight layout is the tutorial's."""
    pytest.importorskip("tf_keras")
    tutorial = tutorial_classes()
    return (
        tutorial.Encoder(vocab_c, units),
        # Start and end ids only matter for generation, unused here.
        tutorial.Decoder(vocab_t, units, start_token=2, end_token=3),
    )


def test_tutorial_weights_load_and_give_the_same_outputs(rng):
    ctx, target = _inputs(rng)
    tut_encoder, tut_decoder = _tutorial_layers(VOCAB_C, VOCAB_T, UNITS)
    tut_context = tut_encoder(ctx)
    tut_logits, tut_state = tut_decoder(tut_context, target, return_state=True)
    tut_weights = np.asarray(tut_decoder.last_attention_weights)
    # Randomize the tutorial's weights (its biases start at zero).
    for layer in (tut_encoder, tut_decoder):
        layer.set_weights(
            [rng.uniform(-0.5, 0.5, w.shape) for w in layer.get_weights()]
        )
    tut_context = tut_encoder(ctx)
    tut_logits, tut_state = tut_decoder(tut_context, target, return_state=True)
    tut_weights = np.asarray(tut_decoder.last_attention_weights)
    tut_logits, tut_state = np.asarray(tut_logits), np.asarray(tut_state)

    encoder, decoder = Encoder(VOCAB_C, UNITS), Decoder(VOCAB_T, UNITS)
    encoder.build(ctx.shape)
    decoder.build(ctx.shape + (UNITS,), target.shape)
    encoder.set_weights(tut_encoder.get_weights())
    decoder.set_weights(tut_decoder.get_weights())

    real = target != 0
    context = encoder(ctx)
    np.testing.assert_allclose(
        np_(context)[ctx != 0],
        np.asarray(tut_context)[ctx != 0],
        atol=TUTORIAL_ATOL,
    )
    # First call, repeated calls with the same context tensor (mask from
    # the encoder's metadata), an explicit mask and a compiled call.
    compiled = compile_reader(
        lambda c, t: decoder(
            encoder(c),
            t,
            context_mask=keras.ops.not_equal(c, 0),
            return_state=True,
            return_attention_weights=True,
        ),
        encoder.variables + decoder.variables,
    )
    runs = [
        decoder(
            context,
            target,
            return_state=True,
            return_attention_weights=True,
        )
        for _ in range(2)
    ]
    runs.append(
        decoder(
            context,
            target,
            context_mask=ctx != 0,
            return_state=True,
            return_attention_weights=True,
        )
    )
    runs.append(compiled(*map(keras.ops.convert_to_tensor, (ctx, target))))
    for logits, state, weights in runs:
        # Padded target positions are not compared: the tutorial masks those
        # query rows (their values are meaningless), kmodels does not.
        np.testing.assert_allclose(
            np_(logits)[real], tut_logits[real], atol=TUTORIAL_ATOL
        )
        np.testing.assert_allclose(np_(state), tut_state, atol=TUTORIAL_ATOL)
        np.testing.assert_allclose(
            np_(weights)[real], tut_weights[real], atol=TUTORIAL_ATOL
        )
