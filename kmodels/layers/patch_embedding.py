import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kmodels")
class PatchEmbedding(keras.layers.Layer):
    """Splits images into square patches and projects each to a vector.

    The image-side counterpart of a token `keras.layers.Embedding`: a
    `(batch, height, width, channels)` image becomes a sequence of
    `(height / patch_size) * (width / patch_size)` patch vectors, in row-major
    patch order, each `flatten(patch) @ W + b` (Dosovitskiy et al., 2021). It
    is a `Conv2D` with kernel and stride `patch_size`, reshaped to a sequence,
    so it can be wrapped in `kmodels.layers.PositionalEmbedding` exactly like
    a token embedding.

    Args:
        patch_size: int, the side of the square patches; must divide the
            image height and width.
        embedding_dim: int, the size of each patch vector.
        kernel_initializer: initializer of the projection. Defaults to
            `"glorot_uniform"`.
        bias_initializer: initializer of the bias. Defaults to `"zeros"`.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`,
            including `name`, `trainable`, `dtype` etc.

    Call arguments:
        inputs: float images `(batch, height, width, channels)`
            (channels last).

    Example:

    ```python
    layer = kmodels.layers.PatchEmbedding(patch_size=2, embedding_dim=16)
    layer(np.zeros((4, 8, 8, 1))).shape  # (4, 16, 16)
    ```

    References:
     - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929)
    """

    def __init__(
        self,
        patch_size,
        embedding_dim,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        for arg, value in (
            ("patch_size", patch_size),
            ("embedding_dim", embedding_dim),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"PatchEmbedding expects `{arg}` to be a positive int; "
                    f"got {value!r}."
                )
        self.patch_size = patch_size
        self.embedding_dim = embedding_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.projection = keras.layers.Conv2D(
            embedding_dim,
            kernel_size=patch_size,
            strides=patch_size,
            padding="valid",
            data_format="channels_last",
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="projection",
        )

    def _check_shape(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                "PatchEmbedding expects images of shape (batch, height, "
                f"width, channels); got shape {tuple(input_shape)}."
            )
        for axis, size in (
            ("height", input_shape[1]),
            ("width", input_shape[2]),
        ):
            if size is not None and size % self.patch_size:
                raise ValueError(
                    f"PatchEmbedding expects the image {axis} to be a "
                    f"multiple of patch_size={self.patch_size}; got {size}."
                )

    def build(self, input_shape):
        self._check_shape(input_shape)
        self.projection.build(tuple(input_shape))
        self.built = True

    def call(self, inputs):
        patches = self.projection(inputs)
        shape = ops.shape(patches)
        return ops.reshape(
            patches, (shape[0], shape[1] * shape[2], self.embedding_dim)
        )

    def compute_output_shape(self, input_shape):
        self._check_shape(input_shape)
        _, height, width, _ = input_shape
        if height is None or width is None:
            patches = None
        else:
            patches = (height // self.patch_size) * (width // self.patch_size)
        return (input_shape[0], patches, self.embedding_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "embedding_dim": self.embedding_dim,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
            }
        )
        return config
