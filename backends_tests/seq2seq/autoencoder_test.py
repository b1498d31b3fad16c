"""Autoencoder: logits against the oracle, gradient flow, construction from
an encoder, `.keras` round trip."""

import re

import keras
import numpy as np
import pytest

from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import Encoder
from kmodels.seq2seq import masked_loss
from kmodels.testing import oracle
from kmodels.testing.gradients import loss_gradients
from kmodels.testing.layer_contract import run_layer_test

np_ = keras.ops.convert_to_numpy

VOCAB, UNITS = 8, 4
# float32 vs the float64 oracle (BiGRU then Dense): measured ~2e-7.
RTOL, ATOL = 1e-5, 1e-6


def _tokens(rng):
    tokens = rng.integers(1, VOCAB, (3, 5)).astype("int32")
    tokens[1, 3:] = 0
    tokens[2, 1:] = 0
    return tokens


def test_logits_match_oracle_and_every_weight_gets_a_gradient(
    rng, randomize, parity
):
    tokens = _tokens(rng)
    model = Autoencoder(VOCAB, UNITS)
    model.build(tokens.shape)
    w = randomize(model)
    logits = np_(model(tokens))
    context = oracle.seq2seq_encoder(tokens, w[:7])
    expected = oracle.dense(context, w[7], w[8])
    np.testing.assert_allclose(logits, expected, rtol=RTOL, atol=ATOL)
    parity.record("seq2seq/autoencoder_logits", logits, ATOL, RTOL)
    loss, grads = loss_gradients(
        model, lambda: masked_loss(tokens, model(tokens))
    )
    assert loss == pytest.approx(
        oracle.masked_cross_entropy(tokens, expected), rel=1e-5
    )
    assert len(grads) == 9
    assert [
        v.path
        for v, g in zip(model.trainable_variables, grads)
        if not np.any(g != 0)
    ] == []


def test_built_around_an_existing_encoder():
    encoder = Encoder(VOCAB, UNITS)
    model = Autoencoder(encoder)
    assert model.encoder is encoder
    assert model.vocabulary_size == VOCAB and model.units == UNITS
    with pytest.raises(ValueError, match=re.escape("units=5 does not match")):
        Autoencoder(encoder, units=5)
    with pytest.raises(ValueError, match="needs `units`"):
        Autoencoder(VOCAB)


def test_model_contract(rng):
    """Config and .keras round trips of the model with a frozen encoder:
    the class, the freezing (2 trainable weights, the encoder's 7 not), the
    weights and outputs survive; no mask on the logits."""
    tokens = _tokens(rng)
    run_layer_test(
        Autoencoder,
        dict(
            encoder_or_vocabulary_size=Encoder(
                VOCAB, UNITS, trainable=False, name="encoder"
            )
        ),
        input_data=tokens,
        expected_output_shape=(3, 5, VOCAB),
        expected_output_dtype="float32",
        expected_num_trainable_weights=2,  # the output Dense only
        expected_num_non_trainable_weights=7,
        expected_mask=False,
        # Training with a frozen pretrained encoder is pinned in
        # translator_test.py (the encoder's weights stay bit-identical).
        run_training_check=False,
        # Same weights, same ops: identical outputs after a .keras round
        # trip.
        tolerance=0,
    )
