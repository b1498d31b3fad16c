"""keras-hub's TransformerEncoder fed by token + PositionEmbedding, against
the NumPy oracle, with a padding mask."""

import keras
import keras_hub
import numpy as np

from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy

# Two LayerNorms, attention and a ReLU FFN in float32: measured ~3e-7
# relative; 1e-5 relative / 1e-5 absolute stated.
RTOL, ATOL = 1e-5, 1e-5


def _encoder_weights(enc, randomize):
    mha = randomize(enc._self_attention_layer)
    att_norm = randomize(enc._self_attention_layer_norm)
    inner = randomize(enc._feedforward_intermediate_dense)
    outer = randomize(enc._feedforward_output_dense)
    ffn_norm = randomize(enc._feedforward_layer_norm)
    return mha, att_norm, inner, outer, ffn_norm


def test_token_position_transformer_encoder(rng, randomize, parity):
    vocab, seq, dim = 11, 6, 8
    ids = rng.integers(1, vocab, size=(3, seq))
    ids[1, 4:] = 0
    ids[2, 2:] = 0
    padding = ids != 0

    token = keras.layers.Embedding(vocab, dim)
    position = keras_hub.layers.PositionEmbedding(seq)
    enc = keras_hub.layers.TransformerEncoder(intermediate_dim=16, num_heads=2)
    token.build(ids.shape)
    position.build((3, seq, dim))
    enc.build((3, seq, dim))
    (table,) = randomize(token)
    (pos_table,) = randomize(position)
    weights = _encoder_weights(enc, randomize)

    x = token(ids)
    x = x + position(x)
    out = np_(enc(x, padding_mask=padding))

    ref_x = oracle.embedding(ids, table) + oracle.learned_position_embedding(
        pos_table, seq
    )
    ref = oracle.transformer_encoder(ref_x, *weights, padding_mask=padding)
    np.testing.assert_allclose(out[padding], ref[padding], rtol=RTOL, atol=ATOL)
    parity.record(
        "oracle/transformer_encoder",
        np.where(padding[..., None], out, 0.0),
        atol=ATOL,
        rtol=RTOL,
    )


def test_sine_position_encoding(parity):
    layer = keras_hub.layers.SinePositionEncoding()
    out = np_(layer(np.zeros((1, 9, 6), "float32")))[0]
    ref = oracle.sine_position_encoding(9, 6)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    parity.record("oracle/sine_positions", out, atol=1e-6, rtol=1e-5)
