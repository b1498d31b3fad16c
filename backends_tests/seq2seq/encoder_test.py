"""Encoder against the NumPy oracle; masks on first, repeated and compiled
calls; padding invariance; serialization."""

import keras
import numpy as np

from kmodels.backend.compiled import compile_reader
from kmodels.seq2seq import Encoder
from kmodels.seq2seq.masking import padding_mask
from kmodels.testing import oracle
from kmodels.testing.layer_contract import run_layer_test

np_ = keras.ops.convert_to_numpy

# float32 Keras vs the float64 oracle over 5 recurrent steps with O(1)
# values: measured errors ~1e-7; 1e-5 relative with 1e-6 absolute is the
# foundation's bound.
RTOL, ATOL = 1e-5, 1e-6

VOCAB, UNITS = 11, 4


def _tokens(rng):
    # Right padding of different lengths, one full row.
    tokens = rng.integers(1, VOCAB, (3, 5))
    tokens[1, 3:] = 0
    tokens[2, 1:] = 0
    return tokens.astype("int32")


def _encoder(rng, randomize, tokens):
    encoder = Encoder(VOCAB, UNITS)
    encoder.build(tokens.shape)
    return encoder, randomize(encoder)


def test_context_matches_oracle_with_padding(rng, randomize, parity):
    tokens = _tokens(rng)
    encoder, w = _encoder(rng, randomize, tokens)
    context = np_(encoder(tokens))
    expected = oracle.seq2seq_encoder(tokens, w)
    np.testing.assert_allclose(context, expected, rtol=RTOL, atol=ATOL)
    # Padded positions are exactly zero (no content).
    assert np.all(context[tokens == 0] == 0.0)
    parity.record("seq2seq/encoder_context", context, atol=ATOL, rtol=RTOL)


def test_mask_is_attached_on_first_repeated_and_compiled_calls(rng, randomize):
    tokens = _tokens(rng)
    encoder = Encoder(VOCAB, UNITS)
    first = encoder(tokens)  # the building call
    randomize(encoder)
    second = encoder(tokens)
    third = encoder(tokens)
    expected = tokens != 0
    for out in (first, second, third):
        mask = keras.src.backend.get_keras_mask(out)
        np.testing.assert_array_equal(np_(mask), expected)
    np.testing.assert_array_equal(np_(second), np_(third))
    compiled = compile_reader(lambda x: encoder(x), encoder.variables)
    np.testing.assert_allclose(
        np_(compiled(keras.ops.convert_to_tensor(tokens))),
        np_(second),
        rtol=RTOL,
        atol=ATOL,
    )


def test_padding_does_not_change_real_positions(rng, randomize):
    tokens = _tokens(rng)
    encoder, _ = _encoder(rng, randomize, tokens)
    padded = np.concatenate([tokens, np.zeros((3, 4), "int32")], axis=1)
    short = np_(encoder(tokens))
    long = np_(encoder(padded))
    # Same arithmetic on the same real steps: equal to float32 rounding.
    np.testing.assert_allclose(long[:, :5], short, rtol=1e-6, atol=1e-7)
    assert np.all(long[:, 5:] == 0.0)


def test_padding_mask_is_ids_not_zero():
    mask = np_(padding_mask(np.array([[3, 0, 5], [0, 0, 1]])))
    np.testing.assert_array_equal(mask, [[1, 0, 1], [0, 0, 1]])


def test_layer_contract(rng):
    tokens = _tokens(rng)
    encoder = run_layer_test(
        Encoder,
        dict(vocabulary_size=VOCAB, units=UNITS),
        input_data=tokens,
        expected_output_shape=(3, 5, UNITS),
        expected_output_dtype="float32",
        expected_num_trainable_weights=7,
        expected_num_non_trainable_weights=0,
        supports_masking=True,
        expected_mask=tokens != 0,
        # Same weights, same GRU kernels: identical outputs after a .keras
        # round trip.
        tolerance=0,
    )
    # A functional input of any batch size and length.
    symbolic = encoder(keras.Input((7,), dtype="int32"))
    assert tuple(symbolic.shape) == (None, 7, UNITS)


def test_weights_are_in_tutorial_order():
    encoder = Encoder(VOCAB, UNITS)
    encoder.build((2, 5))
    shapes = [tuple(w.shape) for w in encoder.weights]
    per_direction = [(UNITS, 3 * UNITS), (UNITS, 3 * UNITS), (2, 3 * UNITS)]
    assert shapes == [(VOCAB, UNITS)] + per_direction * 2
    assert "forward" in encoder.weights[1].path
    assert "backward" in encoder.weights[4].path


def test_right_padded_rows_equal_the_masked_bidirectional_gru(rng, randomize):
    # Both of the encoder's own paths, `kmodels.seq2seq.gru` (the CPU) and
    # the unmasked Keras GRUs on right-padded rows (torch on CUDA, see
    # Encoder._right_padded_rnn), must equal Keras' masked BiGRU.
    tokens = _tokens(rng)
    encoder, _ = _encoder(rng, randomize, tokens)
    x = encoder.embedding(tokens)
    masked = np_(encoder.rnn(x, mask=tokens != 0))
    masked = np.where((tokens != 0)[..., None], masked, 0.0)
    # Same weights and equations, possibly other kernels: float32 rounding.
    np.testing.assert_allclose(
        np_(encoder(tokens)), masked, rtol=1e-6, atol=1e-6
    )
    right_padded = encoder._right_padded_rnn(
        keras.ops.convert_to_tensor(np_(x)),
        keras.ops.convert_to_tensor(tokens != 0),
    )
    np.testing.assert_allclose(np_(right_padded), masked, rtol=1e-6, atol=1e-6)


def test_interior_padding_keeps_masked_semantics(rng, randomize):
    # Not right-padded: a 0 inside a row is skipped by both GRUs.
    tokens = _tokens(rng)
    tokens[0, 1] = 0
    encoder, w = _encoder(rng, randomize, tokens)
    np.testing.assert_allclose(
        np_(encoder(tokens)),
        oracle.seq2seq_encoder(tokens, w),
        rtol=RTOL,
        atol=ATOL,
    )
