import keras

from kmodels.arguments import check_choice
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.arguments import check_rate
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
        num_classes: int >= 1, number of output logits.
        num_layers: int >= 1, number of encoder blocks. Defaults to `1`.
        num_heads: int in `[1, width]`, attention heads per block, where
            `width` is the embedding's output width (doubled with
            `merge="concat"`); each head gets `width // num_heads` features.
            Defaults to `2`.
        intermediate_dim: int >= 1, feed-forward width. Defaults to `32`.
        position: `"learned"` or `"sine"` (see `PositionalEmbedding`).
        merge: `"add"` or `"concat"` (see `PositionalEmbedding`).
        dropout: float in `[0, 1)`, dropout rate inside the encoder blocks.
        sequence_length: int >= 1, positions the learned table holds (at
            least the number of embedded positions); defaults
            to the number of embedded positions of `input_shape`. Required
            when that is `None` (variable-length ids, `input_shape=(None,)`).
        input_dtype: dtype of the `keras.Input`; defaults to `"int32"` for
            1-D inputs (ids) and `"float32"` otherwise.
        name: the model's name.

    Returns:
        A functional `keras.Model` returning logits `(batch, num_classes)`.

    Raises:
        ValueError: an argument is out of range or of the wrong kind
            (checked before any layer or variable is made; NumPy ints are
            accepted, `2.5`, `"8"` and `True` are not).
        TypeError: `embedding` is not a `keras.layers.Layer`.

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
    # Every argument is checked before any layer or variable is made.
    owner = "transformer_encoder"
    if not isinstance(embedding, keras.layers.Layer):
        raise TypeError(
            f"{owner} expects `embedding` to be a keras.layers.Layer (e.g. "
            f"keras.layers.Embedding(...)); got {type(embedding).__name__}."
        )
    if not isinstance(input_shape, (tuple, list)) or not input_shape:
        raise ValueError(
            f"{owner}: `input_shape` must be a non-empty tuple, e.g. (seq,) "
            f"or (height, width, channels); got {input_shape!r}."
        )
    input_shape = tuple(
        check_optional_int(size, f"input_shape[{i}]", owner)
        for i, size in enumerate(input_shape)
    )
    num_classes = check_int(num_classes, "num_classes", owner)
    num_layers = check_int(num_layers, "num_layers", owner)
    num_heads = check_int(num_heads, "num_heads", owner)
    intermediate_dim = check_int(intermediate_dim, "intermediate_dim", owner)
    position = check_choice(position, "position", owner, ("learned", "sine"))
    merge = check_choice(merge, "merge", owner, ("add", "concat"))
    dropout = check_rate(dropout, "dropout", owner)
    sequence_length = check_optional_int(
        sequence_length, "sequence_length", owner
    )
    if input_dtype is None:
        input_dtype = "int32" if len(input_shape) == 1 else "float32"
    embedded_shape = embedding.compute_output_shape((None,) + input_shape)
    positions, width = embedded_shape[1], embedded_shape[-1]
    if sequence_length is None:
        sequence_length = positions
    if sequence_length is None:
        raise ValueError(
            "transformer_encoder needs `sequence_length` when input_shape "
            f"{input_shape} has a variable number of positions."
        )
    if positions is not None and positions > sequence_length:
        raise ValueError(
            f"{owner}: `sequence_length` must be at least the {positions} "
            f"positions of input_shape {input_shape}; got {sequence_length}."
        )
    if width is not None:
        # keras_hub's TransformerEncoder gives each head
        # `width // num_heads` features (no divisibility needed), so a
        # head needs at least one.
        width = width * 2 if merge == "concat" else width
        if num_heads > width:
            raise ValueError(
                f"{owner}: `num_heads` must be at most the model width "
                f"{width} (each head gets width // num_heads features); got "
                f"{num_heads}."
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
    # Imported here: `import kmodels` does not import keras-hub (nor,
    # through it, TensorFlow).
    import keras_hub

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
