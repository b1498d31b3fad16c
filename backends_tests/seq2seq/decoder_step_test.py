"""`kmodels.seq2seq.decoder_step` against the `Decoder` it stands for (on
the context repeated per group) and the NumPy oracle
(`kmodels.testing.oracle`), and beam search through it against beam
search through the decoder itself, on every backend."""

import keras
import numpy as np
import pytest
from keras import ops

from kmodels.seq2seq import Translator
from kmodels.seq2seq import beam_search
from kmodels.seq2seq.constraints import Constraints
from kmodels.seq2seq.decoder_step import decoder_step
from kmodels.seq2seq.decoder_step import supports
from kmodels.seq2seq.masking import padding_mask
from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy
GROUP, UNITS = 3, 6


def _model(dtype=None, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 20, (4, 7)).astype("int32")
    tokens[1, 4:] = 0
    tokens[2, 1:] = 0
    model = Translator(20, 9, UNITS, start_id=2, end_id=3, dtype=dtype)
    model.build((tokens.shape, (4, 1)))
    # Large weights make rows and steps differ.
    model.set_weights(
        [
            rng.uniform(-scale, scale, w.shape).astype("float32")
            for w in model.weights
        ]
    )
    return model, tokens


def _steps(model, tokens, step):
    """Three steps from a random state, through `step` and through the
    decoder on the repeated context; ids include padding (a masked
    step)."""
    rng = np.random.default_rng(1)
    rows = tokens.shape[0] * GROUP
    context = model.encoder(tokens)
    repeated = ops.repeat(context, GROUP, axis=0)
    mask = ops.repeat(padding_mask(tokens), GROUP, axis=0)
    initial = rng.uniform(-1, 1, (rows, UNITS)).astype("float32")
    state = ops.cast(initial, model.compute_dtype)
    expected_state = state
    ids = rng.integers(0, 9, (3, rows)).astype("int32")
    ids[:, :2] = [[0, 5], [4, 0], [0, 0]]
    out = []
    for token in ids:
        got = step(token, state)
        state = got[1]
        logits, expected_state, weights = model.decoder(
            repeated,
            token[:, None],
            state=expected_state,
            return_state=True,
            context_mask=mask,
            return_attention_weights=True,
        )
        out.append((got, (logits[:, 0], expected_state, weights[:, 0])))
    return ids, initial, out


def _oracle_steps(model, tokens, ids, state):
    """The NumPy oracle's logits, states and attention weights (float64)
    for the steps of `_steps`."""
    weights = model.get_weights()
    context = np.repeat(
        oracle.seq2seq_encoder(tokens, weights[:7]), GROUP, axis=0
    )
    mask = np.repeat(tokens != 0, GROUP, axis=0)
    out = []
    for token in ids:
        logits, state, attention = oracle.seq2seq_decoder(
            context, mask, token[:, None], weights[7:], state
        )
        out.append((logits[:, 0], state, attention[:, 0]))
    return out


def test_step_equals_the_decoder_and_the_oracle():
    model, tokens = _model()
    context = model.encoder(tokens)
    step = decoder_step(model.decoder, context, padding_mask(tokens), GROUP)
    ids, state, out = _steps(model, tokens, step)
    expected = _oracle_steps(model, tokens, ids, state)
    for (got, decoder), numpy in zip(out, expected):
        got = [np_(x) for x in got]
        assert [x.dtype for x in got] == [np.float32] * 3
        assert got[0].shape == (12, 9) and got[2].shape == (12, 7)
        # float32 against float32 in another order: measured < 1e-6.
        for a, b in zip(got, decoder):
            np.testing.assert_allclose(a, np_(b), rtol=1e-5, atol=1e-5)
        # Against float64 (logits up to ~12).
        for a, b in zip(got, numpy):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_half_precision_step_has_the_decoders_dtypes_and_accuracy(policy):
    """Under a mixed policy: the decoder's dtypes, and the decoder's
    accuracy against the float64 oracle. The two round in different places
    (a few half-precision roundings apart, which LayerNorm amplifies in a
    row of small spread: weights in [-0.5, 0.5] keep the spread of this
    model's rows well away from 0), bounded at 16 roundings of the largest
    value, for both."""
    model, tokens = _model(policy, scale=0.5)
    step = decoder_step(
        model.decoder, model.encoder(tokens), padding_mask(tokens), GROUP
    )
    ids, state, out = _steps(model, tokens, step)
    expected = _oracle_steps(model, tokens, ids, state)
    eps = 2.0**-8 if policy == "mixed_bfloat16" else 2.0**-11
    for (got, decoder), numpy in zip(out, expected):
        for a, b, c in zip(got, decoder, numpy):
            dtype = keras.backend.standardize_dtype(a.dtype)
            assert dtype == keras.backend.standardize_dtype(b.dtype)
            assert dtype == policy[len("mixed_") :]
            bound = 16 * eps * np.abs(c).max()
            for x in (a, b):
                x = np_(ops.cast(x, "float32"))
                np.testing.assert_allclose(x, c, rtol=0, atol=bound)


def test_other_configurations_fall_back_to_the_decoder(monkeypatch):
    model, tokens = _model(seed=3)
    context, mask = model.encoder(tokens), padding_mask(tokens)
    args = (6, 3, True, Constraints())
    fast = [np_(x) for x in beam_search.beam_loop(model, context, mask, *args)]
    # RMS scaling is no configuration `Decoder` builds.
    model.decoder.attention.layernorm.rms_scaling = True
    assert not supports(model.decoder)
    assert decoder_step(model.decoder, context, mask) is None
    model.decoder.attention.layernorm.rms_scaling = False
    # Beam search through the decoder itself, on the repeated context.
    monkeypatch.setattr(beam_search, "decoder_step", lambda *a: None)
    slow = [np_(x) for x in beam_search.beam_loop(model, context, mask, *args)]
    np.testing.assert_array_equal(fast[0], slow[0])
    assert len(np.unique(fast[0])) >= 4  # different ids, rows, beams
    np.testing.assert_allclose(fast[1], slow[1], atol=1e-5)
    np.testing.assert_allclose(fast[2], slow[2], rtol=1e-5, atol=1e-5)
