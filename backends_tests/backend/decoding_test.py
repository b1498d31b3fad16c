"""`kmodels.backend.decoding.greedy_loop` (torch's native greedy loop)
against a NumPy greedy decoder built from the oracle, and the same answer
from `Translator.generate` on every backend."""

import keras
import numpy as np
import pytest
from keras import ops

from kmodels.backend.decoding import decoder_step
from kmodels.backend.decoding import greedy_loop
from kmodels.seq2seq import Translator
from kmodels.seq2seq.masking import padding_mask
from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy
START, END = 2, 3


def _oracle_greedy(context_tokens, weights, units, max_length):
    """Greedy decoding with the oracle's decoder, one step at a time:
    `(ids, attention, scores)` with the `generate` contract."""
    encoder_weights, decoder_weights = weights[:7], weights[7:]
    tokens = np.asarray(context_tokens)
    context = oracle.seq2seq_encoder(tokens, encoder_weights)
    batch = tokens.shape[0]
    ids = np.zeros((batch, max_length), "int32")
    attention = np.zeros((batch, max_length, tokens.shape[1]))
    scores = np.zeros(batch)
    done = np.zeros(batch, bool)
    token = np.full((batch, 1), START)
    state = np.zeros((batch, units))
    for i in range(max_length):
        logits, state, weights_i = oracle.seq2seq_decoder(
            context, tokens != 0, token, decoder_weights, state=state
        )
        logits = logits[:, 0].astype("float64")
        logits[:, 0] = -np.inf  # the padding id is never generated
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        nxt = np.argmax(logits, -1)
        scores = np.where(
            done, scores, scores + log_probs[np.arange(batch), nxt]
        )
        done = done | (nxt == END)
        nxt = np.where(done, 0, nxt)
        ids[:, i] = nxt
        attention[:, i] = np.where(done[:, None], 0.0, weights_i[:, 0])
        token = nxt[:, None]
    return ids, attention, scores


def _model(seed, units=6, vocab_t=9):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 20, (4, 7)).astype("int32")
    tokens[1, 4:] = 0
    tokens[2, 1:] = 0
    model = Translator(20, vocab_t, units, start_id=START, end_id=END)
    model.build((tokens.shape, (4, 1)))
    # Large weights make rows and steps emit different tokens.
    model.set_weights(
        [rng.uniform(-2, 2, w.shape).astype("float32") for w in model.weights]
    )
    return model, tokens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_decoding_matches_the_oracle(seed):
    model, tokens = _model(seed)
    expected = _oracle_greedy(tokens, model.get_weights(), 6, 8)
    ids, attention = map(np_, model.generate(tokens, max_length=8))
    np.testing.assert_array_equal(ids, expected[0])
    np.testing.assert_allclose(attention, expected[1], atol=1e-5)
    native = greedy_loop(
        model.decoder,
        model.encoder(tokens),
        padding_mask(ops.convert_to_tensor(tokens)),
        START,
        END,
        8,
    )
    if keras.backend.backend() != "torch":
        # TensorFlow and JAX compile the Keras loop of `generate` instead.
        assert native is None
        return
    ids, attention, scores = map(np_, native)
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, expected[0])
    np.testing.assert_allclose(attention, expected[1], atol=1e-5)
    np.testing.assert_allclose(scores, expected[2], rtol=1e-5, atol=1e-5)


def test_the_loop_stops_when_every_row_has_ended():
    model, tokens = _model(0)
    weights = model.get_weights()
    # An output bias that makes END the argmax at the first step.
    weights[-1] = np.zeros_like(weights[-1])
    weights[-1][END] = 1e3
    model.set_weights(weights)
    ids, attention = map(np_, model.generate(tokens, max_length=5))
    np.testing.assert_array_equal(ids, np.zeros((4, 5), "int32"))
    np.testing.assert_array_equal(attention, np.zeros((4, 5, 7)))


def test_one_decoder_step_matches_the_oracle():
    model, tokens = _model(4)
    weights = model.get_weights()
    context = oracle.seq2seq_encoder(tokens, weights[:7])
    rng = np.random.default_rng(5)
    token = rng.integers(1, 9, (4,))
    state = rng.normal(size=(4, 6)).astype("float32")
    logits, new_state, attention = oracle.seq2seq_decoder(
        context, tokens != 0, token[:, None], weights[7:], state=state
    )
    step = decoder_step(
        model.decoder,
        model.encoder(tokens),
        padding_mask(ops.convert_to_tensor(tokens)),
    )
    if keras.backend.backend() != "torch":
        # TensorFlow and JAX compile the samplers' loop with the layers.
        assert step is None
        return
    got = [np_(v) for v in step(token, state)]
    np.testing.assert_allclose(got[0], logits[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], new_state, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], attention[:, 0], atol=1e-6)
