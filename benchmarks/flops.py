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


# The matmul floor of the Seq2Seq train step (issue 29): the step's matrix
# products, one by one, with their exact shapes. A product is
# `count` x a `(batch, m, k) @ (batch, k, n)` product (`batch` 1: a plain
# `(m, k) @ (k, n)`), `2 * count * batch * m * k * n` FLOPs.


def product(name, m, k, n, batch=1, count=1):
    """One entry of a product list: a dict `{name, batch, m, k, n, count,
    flops}`."""
    return {
        "name": name,
        "batch": batch,
        "m": m,
        "k": k,
        "n": n,
        "count": count,
        "flops": 2 * count * batch * m * k * n,
    }


def shape_of(entry):
    """The shape key `(batch, m, k, n)` of a product entry."""
    return (entry["batch"], entry["m"], entry["k"], entry["n"])


def _trained(name, m, k, n, batch=1, count=1):
    """A product `x (m, k) @ w (k, n)` and the two of its backward pass:
    the gradient of `x`, `dy (m, n) @ w^T (n, k)`, and of `w`,
    `x^T (k, m) @ dy (m, n)`."""
    return [
        product(f"{name}", m, k, n, batch, count),
        product(f"{name}: d input", m, n, k, batch, count),
        product(f"{name}: d weight", k, m, n, batch, count),
    ]


def gru_train_products(name, batch, length, input_dim, units):
    """A GRU over `length` steps, forward and backward: the input
    projection of every step at once (`(B L, d) @ (d, 3u)`, its input and
    kernel gradients); the recurrent product once per step
    (`(B, u) @ (u, 3u)`, sequential) and its state gradient once per step
    (`(B, 3u) @ (3u, u)`, sequential); the recurrent kernel's gradient as one
    product over all steps (`(u, B L) @ (B L, 3u)`: the states are known
    after the forward pass). `3 x gru_forward` FLOPs."""
    rows = batch * length
    gates = 3 * units
    return _trained(f"{name} input projection", rows, input_dim, gates) + [
        product(f"{name} recurrent step", batch, units, gates, count=length),
        product(
            f"{name} recurrent step: d state",
            batch,
            gates,
            units,
            count=length,
        ),
        product(f"{name} recurrent: d kernel", units, rows, gates),
    ]


def attention_train_products(batch, query_length, value_length, units):
    """Single-head cross-attention, forward and backward: the Q, K, V and
    output projections with their gradients, the scores `Q K^T` and the
    weighted sum `P V` per sequence (batched) with the gradients of both
    operands. `3 x attention_forward` FLOPs."""
    tq, tv = batch * query_length, batch * value_length
    products = _trained("attention query projection", tq, units, units)
    products += _trained("attention key projection", tv, units, units)
    products += _trained("attention value projection", tv, units, units)
    products += [
        product("attention scores Q K^T", query_length, units, value_length,
                batch),
        product("attention scores: d Q", query_length, value_length, units,
                batch),
        product("attention scores: d K", value_length, query_length, units,
                batch),
        product("attention weighted sum P V", query_length, value_length,
                units, batch),
        product("attention weighted sum: d P", query_length, units,
                value_length, batch),
        product("attention weighted sum: d V", value_length, query_length,
                units, batch),
    ]  # fmt: skip
    products += _trained("attention output projection", tq, units, units)
    return products


def seq2seq_train_products(
    batch, source_length, target_length, vocabulary, units
):
    """Every matrix product of one Seq2Seq train step, dense (padded
    positions included), forward and backward: the encoder's two GRUs,
    the decoder GRU, the cross-attention and the output Dense
    (`(B T, u) @ (u, V)` and its two gradients). Their FLOPs add up to
    `seq2seq_train_step`."""
    products = []
    for direction in ("encoder forward GRU", "encoder backward GRU"):
        products += gru_train_products(
            direction, batch, source_length, units, units
        )
    products += gru_train_products(
        "decoder GRU", batch, target_length, units, units
    )
    products += attention_train_products(
        batch, target_length, source_length, units
    )
    products += _trained(
        "output projection", batch * target_length, units, vocabulary
    )
    return products


def matmul_floor_ms(products, rates):
    """The matmul floor in ms: the sum over `products` of each product's
    FLOPs divided by the GFLOP/s `rates[shape_of(product)]` measured for
    its shape."""
    return sum(p["flops"] / rates[shape_of(p)] / 1e6 for p in products)
