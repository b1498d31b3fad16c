import keras
from keras import ops

from kmodels.arguments import check_int
from kmodels.contracts.checks import check_patch_embedding_inputs
from kmodels.contracts.checks import guarded_call


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
        patch_size: int >= 1, the side of the square patches; must divide
            the image height and width.
        embedding_dim: int >= 1, the size of each patch vector.
        kernel_initializer: initializer of the projection. Defaults to
            `"glorot_uniform"`.
        bias_initializer: initializer of the bias. Defaults to `"zeros"`.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`,
            including `name`, `trainable`, `dtype` etc.

    Call arguments:
        inputs: images `(batch, height, width, channels)` (channels last),
            float or integer (e.g. uint8 pixels); they are cast to the
            layer's compute dtype, which is also the output dtype.

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
        # Checked before any sublayer is made; NumPy ints are stored as
        # Python ints, bools and floats are refused.
        patch_size = check_int(patch_size, "patch_size", "PatchEmbedding")
        embedding_dim = check_int(
            embedding_dim, "embedding_dim", "PatchEmbedding"
        )
        kernel_initializer = keras.initializers.get(kernel_initializer)
        bias_initializer = keras.initializers.get(bias_initializer)
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.embedding_dim = embedding_dim
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
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

    def __call__(self, *args, **kwargs):
        # Concrete inputs are checked before Keras converts them (JAX casts
        # int64 NumPy ids to int32, wrapping): kmodels.contracts.
        return guarded_call(self, super().__call__, args, kwargs)

    def _check_call_arguments(self, arguments, training):
        if arguments.get("inputs") is not None:
            check_patch_embedding_inputs(self, arguments.get("inputs"))

    def call(self, inputs):
        # Integer images (e.g. uint8 pixels) are cast to the compute dtype
        # here: Keras only autocasts float inputs, and the convolutions
        # of TensorFlow and torch refuse integers where JAX's accepts them.
        patches = self.projection(ops.cast(inputs, self.compute_dtype))
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
