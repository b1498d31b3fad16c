import keras
import keras_hub

from kmodels.layers.positional_embedding import PositionalEmbedding


def transformer_encoder(
    embedding,
    input_shape,
    num_classes,
    num_layers=1,
    num_heads=2,
    intermediate_dim=32,
    position="learned",
    merge="add",
    dropout=0.0,
    sequence_length=None,
    input_dtype=None,
    name="transformer_encoder",
):
    """A Transformer encoder classifier over tokens or image patches.

    `inputs -> PositionalEmbedding(embedding) -> num_layers x
    keras_hub.layers.TransformerEncoder -> masked mean pooling -> Dense`
    logits. The embedding's padding mask (e.g. `Embedding(mask_zero=True)`)
    reaches every encoder block and the pooling, so padded positions change
    no output. Swapping tokens for images is the
    `embedding` argument only.

    Args:
        embedding: the layer mapping inputs to `(batch, seq, dim)`: a
            `keras.layers.Embedding` for ids or a
            `kmodels.layers.PatchEmbedding` for images.
        input_shape: shape of one example without the batch axis: `(seq,)`
            for ids, `(height, width, channels)` for images.
        num_classes: int, number of output logits.
        num_layers: int, number of encoder blocks. Defaults to `1`.
        num_heads: int, attention heads per block. Defaults to `2`.
        intermediate_dim: int, feed-forward width. Defaults to `32`.
        position: `"learned"` or `"sine"` (see `PositionalEmbedding`).
        merge: `"add"` or `"concat"` (see `PositionalEmbedding`).
        dropout: float, dropout rate inside the encoder blocks.
        sequence_length: int, positions the learned table holds; defaults
            to the number of embedded positions of `input_shape`. Required
            when that is `None` (variable-length ids, `input_shape=(None,)`).
        input_dtype: dtype of the `keras.Input`; defaults to `"int32"` for
            1-D inputs (ids) and `"float32"` otherwise.
        name: the model's name.

    Returns:
        A functional `keras.Model` returning logits `(batch, num_classes)`.

    Example:

    ```python
    model = kmodels.models.transformer_encoder(
        keras.layers.Embedding(50, 16, mask_zero=True), (12,), num_classes=2
    )
    model = kmodels.models.transformer_encoder(
        kmodels.layers.PatchEmbedding(2, 16), (8, 8, 1), num_classes=2
    )
    ```

    References:
     - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """
    input_shape = tuple(input_shape)
    if input_dtype is None:
        input_dtype = "int32" if len(input_shape) == 1 else "float32"
    embedded_shape = embedding.compute_output_shape((None,) + input_shape)
    if sequence_length is None:
        sequence_length = embedded_shape[1]
    if sequence_length is None:
        raise ValueError(
            "transformer_encoder needs `sequence_length` when input_shape "
            f"{input_shape} has a variable number of positions."
        )
    inputs = keras.Input(input_shape, dtype=input_dtype, name="inputs")
    positional = PositionalEmbedding(
        embedding,
        sequence_length=sequence_length,
        position=position,
        merge=merge,
        name="positional_embedding",
    )
    # The embedding's mask travels with `x` (Keras' own mechanism): each
    # TransformerEncoder reads it as its padding mask and the pooling
    # averages real positions only. Passing `padding_mask=` as well would
    # only make keras-hub log a warning on every trace.
    x = positional(inputs)
    for i in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            name=f"encoder_{i}",
        )(x)
    x = keras.layers.GlobalAveragePooling1D(name="pooling")(x)
    outputs = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name=name)
