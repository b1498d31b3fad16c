"""Analytic FLOP counts of the benchmarked models (pure Python).

One multiply-add counts as 2 FLOPs: a `(m, k) @ (k, n)` product is `2*m*k*n`.
Only matrix products are counted (element-wise work, softmax, gates and the
loss are a few percent of the total at the benchmarked sizes). A training step
(forward + backward) counts as 3x the forward pass: the backward pass needs
two products per forward product (gradients of the inputs and the weights).
The formulas are printed in `docs/benchmarks.md`.
"""

TRAIN_FACTOR = 3


def matmul(n):
    """A square `(n, n) @ (n, n)` product: `2 n^3`."""
    return 2 * n**3


def gru_forward(batch, length, input_dim, units):
    """GRU over a sequence: 3 gates, input and recurrent kernels,
    `2 * B * T * 3u * (d + u)`."""
    return 2 * batch * length * 3 * units * (input_dim + units)


def attention_forward(batch, query_length, value_length, units):
    """Single-head `MultiHeadAttention(key_dim=units)` with model width
    `units`: Q and output projections over the queries, K and V projections
    over the values, then scores and the weighted sum,
    `2u^2 (2 B Tq + 2 B Tv) + 4 B Tq Tv u`."""
    projections = 2 * units**2 * (2 * batch * query_length)
    projections += 2 * units**2 * (2 * batch * value_length)
    return projections + 4 * batch * query_length * value_length * units


def dense_forward(rows, input_dim, output_dim):
    """A Dense layer on `rows` vectors: `2 * rows * d_in * d_out`."""
    return 2 * rows * input_dim * output_dim


def bigru_encoder_forward(batch, length, units):
    """Embedding (no FLOPs) + Bidirectional GRU of width `units`
    (input width = units): two GRUs."""
    return 2 * gru_forward(batch, length, units, units)


def seq2seq_forward(batch, source_length, target_length, vocabulary, units):
    """Tutorial Translator forward pass: BiGRU encoder, decoder GRU,
    cross-attention (queries: target, values: source), output Dense to
    the vocabulary."""
    return (
        bigru_encoder_forward(batch, source_length, units)
        + gru_forward(batch, target_length, units, units)
        + attention_forward(batch, target_length, source_length, units)
        + dense_forward(batch * target_length, units, vocabulary)
    )


def seq2seq_train_step(batch, source_length, target_length, vocabulary, units):
    """One Seq2Seq training step: `3 x seq2seq_forward`."""
    return TRAIN_FACTOR * seq2seq_forward(
        batch, source_length, target_length, vocabulary, units
    )


def bigru_encoder_train_step(batch, length, units):
    """One training step of the BiGRU encoder: `3 x forward`."""
    return TRAIN_FACTOR * bigru_encoder_forward(batch, length, units)


def seq2seq_generate(batch, source_length, steps, vocabulary, units):
    """Greedy generation of `steps` tokens for `batch` sequences: encoder
    once, then per token one decoder GRU step, the attention of one query
    over the source (K/V projections of the context counted once per
    sequence: the minimum work) and the output Dense."""
    per_token = (
        gru_forward(batch, 1, units, units)
        + 2 * units**2 * (2 * batch)
        + 4 * batch * source_length * units
        + dense_forward(batch, units, vocabulary)
    )
    context_kv = 2 * units**2 * (2 * batch * source_length)
    encoder = bigru_encoder_forward(batch, source_length, units)
    return encoder + context_kv + steps * per_token


def transformer_layer_forward(batch, length, dim, intermediate_dim):
    """One `keras_hub.layers.TransformerEncoder` layer: Q, K, V and output
    projections `4 * 2 B L d^2`, scores and weighted sum `2 * 2 B L^2 d`
    (summed over heads), feed-forward `2 * 2 B L d f`."""
    projections = 4 * 2 * batch * length * dim**2
    attention = 2 * 2 * batch * length**2 * dim
    feed_forward = 2 * 2 * batch * length * dim * intermediate_dim
    return projections + attention + feed_forward


def transformer_classifier_train_step(
    batch, length, dim, intermediate_dim, layers, classes
):
    """Embedding (no FLOPs) + `layers` Transformer encoder layers + pooling
    + Dense head, one training step: `3 x forward`."""
    forward = layers * transformer_layer_forward(
        batch, length, dim, intermediate_dim
    )
    forward += dense_forward(batch, dim, classes)
    return TRAIN_FACTOR * forward
