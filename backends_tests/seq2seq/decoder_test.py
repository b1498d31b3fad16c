"""Decoder against the oracle and against the original tutorial's classes.

The tutorial's Encoder/CrossAttention/Decoder (seed 000, TensorFlow "NMT with
attention", written for tf.keras 2) are rebuilt here under `tf_keras` in the
same process, whatever the Keras 3 backend: `tf_keras` imports TensorFlow,
which is installed in every test environment, and never touches Keras 3.
"""

import keras
import numpy as np
import pytest

from kmodels.backend.compiled import compile_reader
from kmodels.seq2seq import Decoder
from kmodels.seq2seq import Encoder
from kmodels.testing import oracle

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


def test_config_round_trip_and_shapes():
    decoder = Decoder(VOCAB_T, UNITS, name="dec")
    config = decoder.get_config()
    assert config["vocabulary_size"] == VOCAB_T and config["units"] == UNITS
    assert Decoder.from_config(config).get_config() == config
    assert decoder.compute_output_shape((2, 5, UNITS), (2, 3)) == (
        2,
        3,
        VOCAB_T,
    )


def _tutorial_layers(vocab_c, vocab_t, units):
    """The tutorial's classes as in seed 000 (ShapeChecker calls removed)."""
    tf_keras = pytest.importorskip("tf_keras")
    tf = pytest.importorskip("tensorflow")

    def processor(size):
        words = [f"w{i}" for i in range(size - 2)]
        return tf_keras.layers.TextVectorization(vocabulary=words)

    class TutorialEncoder(tf_keras.layers.Layer):
        def __init__(self, text_processor, units):
            super().__init__()
            self.text_processor = text_processor
            self.vocab_size = text_processor.vocabulary_size()
            self.units = units
            self.embedding = tf_keras.layers.Embedding(
                self.vocab_size, units, mask_zero=True
            )
            self.rnn = tf_keras.layers.Bidirectional(
                merge_mode="sum",
                layer=tf_keras.layers.GRU(
                    units,
                    return_sequences=True,
                    recurrent_initializer="glorot_uniform",
                ),
            )

        def call(self, x):
            return self.rnn(self.embedding(x))

    class TutorialCrossAttention(tf_keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__()
            self.mha = tf_keras.layers.MultiHeadAttention(
                key_dim=units, num_heads=1, **kwargs
            )
            self.layernorm = tf_keras.layers.LayerNormalization()
            self.add = tf_keras.layers.Add()

        def call(self, x, context):
            attn_output, attn_scores = self.mha(
                query=x, value=context, return_attention_scores=True
            )
            attn_scores = tf.reduce_mean(attn_scores, axis=1)
            self.last_attention_weights = attn_scores
            x = self.add([x, attn_output])
            return self.layernorm(x)

    class TutorialDecoder(tf_keras.layers.Layer):
        def __init__(self, text_processor, units):
            super().__init__()
            self.text_processor = text_processor
            self.word_to_id = tf_keras.layers.StringLookup(
                vocabulary=text_processor.get_vocabulary(),
                mask_token="",
                oov_token="[UNK]",
            )
            self.vocab_size = text_processor.vocabulary_size()
            self.units = units
            self.embedding = tf_keras.layers.Embedding(
                self.vocab_size, units, mask_zero=True
            )
            self.rnn = tf_keras.layers.GRU(
                units,
                return_sequences=True,
                return_state=True,
                recurrent_initializer="glorot_uniform",
            )
            self.attention = TutorialCrossAttention(units)
            self.output_layer = tf_keras.layers.Dense(self.vocab_size)

        def call(self, context, x, state=None, return_state=False):
            x = self.embedding(x)
            x, state = self.rnn(x, initial_state=state)
            x = self.attention(x, context)
            self.last_attention_weights = self.attention.last_attention_weights
            logits = self.output_layer(x)
            return (logits, state) if return_state else logits

    return (
        TutorialEncoder(processor(vocab_c), units),
        TutorialDecoder(processor(vocab_t), units),
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
