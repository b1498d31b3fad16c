"""CrossAttention against the oracle; the caller's masks survive the call."""

import keras
import numpy as np
from keras.src.backend import get_keras_mask
from keras.src.backend import set_keras_mask

from kmodels.seq2seq import CrossAttention
from kmodels.testing import oracle
from kmodels.testing.layer_contract import run_layer_test

np_ = keras.ops.convert_to_numpy

# float32 vs float64 through a softmax and a LayerNorm of O(1) values:
# measured errors ~1e-7.
RTOL, ATOL = 1e-5, 1e-6
UNITS = 4


def _inputs(rng):
    x = rng.normal(size=(2, 3, UNITS)).astype("float32")
    context = rng.normal(size=(2, 5, UNITS)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    return x, context, mask


def _layer(randomize, x, context):
    layer = CrossAttention(UNITS)
    layer.build(x.shape, context.shape)
    return layer, randomize(layer)


def _oracle(x, context, mask, w):
    attended, scores = oracle.multi_head_attention(
        x, context, w[:8], value_mask=mask
    )
    return oracle.layer_norm(x + attended, w[8], w[9]), scores.mean(axis=1)


def test_output_and_weights_match_oracle(rng, randomize, parity):
    x, context, mask = _inputs(rng)
    layer, w = _layer(randomize, x, context)
    y, weights = layer(
        x, context, context_mask=mask, return_attention_weights=True
    )
    ref_y, ref_w = _oracle(x, context, mask, w)
    np.testing.assert_allclose(np_(y), ref_y, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np_(weights), ref_w, rtol=RTOL, atol=ATOL)
    # Padded context positions get exactly no attention.
    assert np.all(np_(weights)[0, :, 3:] == 0.0)
    parity.record("seq2seq/attention_weights", np_(weights), ATOL, RTOL)


def test_mask_from_context_metadata_and_repeated_calls(rng, randomize):
    x, context, mask = _inputs(rng)
    layer, w = _layer(randomize, x, context)
    context = keras.ops.convert_to_tensor(context)
    set_keras_mask(context, keras.ops.convert_to_tensor(mask))
    ref_y, _ = _oracle(x, np_(context), mask, w)
    # Keras' MultiHeadAttention deletes its value's mask; a second call with
    # the same context tensor must still be masked.
    for _ in range(3):
        np.testing.assert_allclose(
            np_(layer(x, context)), ref_y, rtol=RTOL, atol=ATOL
        )
        np.testing.assert_array_equal(np_(get_keras_mask(context)), mask)


def test_query_mask_is_not_applied(rng, randomize):
    x, context, mask = _inputs(rng)
    layer, w = _layer(randomize, x, context)
    x = keras.ops.convert_to_tensor(x)
    query_mask = keras.ops.convert_to_tensor(np.array([[1, 0, 0]] * 2, bool))
    set_keras_mask(x, query_mask)
    ref_y, ref_w = _oracle(np_(x), context, mask, w)
    y, weights = layer(
        x, context, context_mask=mask, return_attention_weights=True
    )
    np.testing.assert_allclose(np_(weights), ref_w, rtol=RTOL, atol=ATOL)
    # The query's mask is passed through to the output, unchanged.
    np.testing.assert_array_equal(np_(get_keras_mask(y)), np_(query_mask))
    np.testing.assert_array_equal(np_(get_keras_mask(x)), np_(query_mask))


def test_no_tensor_is_stored_on_the_layer(rng, randomize):
    x, context, mask = _inputs(rng)
    layer, _ = _layer(randomize, x, context)
    before = set(vars(layer))
    layer(x, context, context_mask=mask, return_attention_weights=True)
    assert set(vars(layer)) - before <= {"_called"}


def test_layer_contract(rng):
    x, context, mask = _inputs(rng)
    layer = run_layer_test(
        CrossAttention,
        dict(units=UNITS),
        input_data=dict(x=x, context=context, context_mask=mask),
        call_kwargs=dict(return_attention_weights=True),
        expected_output_shape=((2, 3, UNITS), (2, 3, 5)),
        expected_output_dtype="float32",
        # MultiHeadAttention (4 kernels, 4 biases) and LayerNormalization.
        expected_num_trainable_weights=10,
        expected_num_non_trainable_weights=0,
        supports_masking=True,
        # The query carries no mask here, so neither does the output.
        expected_mask=False,
        # Same weights, same ops: identical outputs after a .keras round
        # trip.
        tolerance=0,
    )
    # Without the flag: the output only.
    assert layer.compute_output_shape((2, 3, 4), (2, 5, 4)) == (2, 3, 4)
