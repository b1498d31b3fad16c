"""The attention seq2seq model (Bahdanau et al., 2015, in the form of the
TensorFlow "NMT with attention" tutorial) composed from the oracle's blocks.

Weights are lists in the `get_weights()` order of `kmodels.seq2seq`:

- encoder: `[embeddings, fwd kernel, fwd recurrent_kernel, fwd bias,
  bwd kernel, bwd recurrent_kernel, bwd bias]`;
- decoder: `[embeddings, kernel, recurrent_kernel, bias, 8 attention arrays
  (query, key, value, output: kernel and bias each), gamma, beta,
  output kernel, output bias]`.

Id 0 is padding: recurrent steps on it are skipped (state carried), the
encoder context is zero there, and attention never looks at padded context
positions. Padded query positions attend like real ones.
"""

import numpy as np

from kmodels.testing.oracle.attention import multi_head_attention
from kmodels.testing.oracle.dense import dense
from kmodels.testing.oracle.embedding import embedding
from kmodels.testing.oracle.gru import bidirectional_gru
from kmodels.testing.oracle.gru import gru
from kmodels.testing.oracle.losses import masked_cross_entropy
from kmodels.testing.oracle.normalization import layer_norm


def seq2seq_encoder(tokens, weights):
    """Context `(batch, s, units)`: the sum of both GRU directions, zero at
    padded positions."""
    tokens = np.asarray(tokens)
    mask = tokens != 0
    x = embedding(tokens, weights[0])
    context, _, _ = bidirectional_gru(
        x, tuple(weights[1:4]), tuple(weights[4:7]), mask=mask
    )
    return np.where(mask[..., None], context, 0.0)


def seq2seq_decoder(context, context_mask, tokens, weights, state=None):
    """Returns `(logits (batch, t, vocab), state (batch, units),
    attention weights (batch, t, s))`.

    h_t = GRU(embedding(y_t), h_{t-1});  a_t = attention(h_t, context);
    z_t = LayerNorm(h_t + a_t);  logits_t = z_t W + b.
    """
    tokens = np.asarray(tokens)
    x = embedding(tokens, weights[0])
    seq, state = gru(x, *weights[1:4], mask=tokens != 0, initial_state=state)
    attended, scores = multi_head_attention(
        seq, context, weights[4:12], value_mask=context_mask
    )
    z = layer_norm(seq + attended, weights[12], weights[13])
    logits = dense(z, weights[14], weights[15])
    return logits, state, scores.mean(axis=1)


def seq2seq_loss(
    context_tokens, target_in, target_out, encoder_weights, decoder_weights
):
    """`masked_cross_entropy` of the translator's logits (padding excluded)."""
    context = seq2seq_encoder(context_tokens, encoder_weights)
    logits, _, _ = seq2seq_decoder(
        context, np.asarray(context_tokens) != 0, target_in, decoder_weights
    )
    return masked_cross_entropy(target_out, logits)
