import keras
from keras import ops

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_int
from kmodels.contracts.checks import check_patch_embedding_inputs
from kmodels.contracts.checks import guarded_call

_PADDINGS = ("valid", "same")


def _patch_size(value, owner):
    """An int >= 1 (square patches, kept as an int) or a pair of them,
    `(height, width)`, kept as a tuple of Python ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(
                f"{owner}: `patch_size` must be an integer >= 1 or a pair "
                f"(height, width) of them; got {value!r}."
            )
        return tuple(check_int(v, "patch_size", owner) for v in value)
    return check_int(value, "patch_size", owner)


@keras.saving.register_keras_serializable(package="kmodels")
class PatchEmbedding(keras.layers.Layer):
    """Splits images into patches and projects each to a vector.

    The image-side counterpart of a token `keras.layers.Embedding`: a
    `(batch, height, width, channels)` image becomes a sequence of
    `(height / patch_height) * (width / patch_width)` patch vectors, in
    row-major patch order, each `flatten(patch) @ W + b` (Dosovitskiy et al.,
    2021). It is a `Conv2D` with kernel and stride `patch_size`, reshaped to
    a sequence, so it can be wrapped in `kmodels.layers.PositionalEmbedding`
    exactly like a token embedding.

    The projection runs on any image size the patches tile. With
    `dynamic_image_size=True` a `PositionalEmbedding` around this layer
    resamples its learned grid of positions to each call's grid of patches
    (see docs/position_embedding.md, "Another image size").

    Args:
        patch_size: int >= 1 (square patches) or a pair `(height, width)`
            of them.
        embedding_dim: int >= 1, the size of each patch vector.
        kernel_initializer: initializer of the projection. Defaults to
            `"glorot_uniform"`.
        bias_initializer: initializer of the bias. Defaults to `"zeros"`.
        padding: `"valid"`: an image side that is not a multiple of the
            patch side is refused (a `ValueError`); `"same"`: the image is
            zero-padded at the bottom and right up to the next multiple,
            as timm's `dynamic_img_pad` (`ceil(height / patch_height)`
            rows of patches; Keras' `Conv2D(padding="same")` would put
            part of the padding at the top and left). Defaults to
            `"valid"`.
        dynamic_image_size: bool. `True` declares that the images may
            change size from call to call: a `PositionalEmbedding` around
            this layer then resamples its learned positions to each call's
            patch grid instead of reading them as a fixed sequence.
            Defaults to `False`.
        class_token: bool. `True` prepends a learned `(1, 1, dim)` token
            (initialised to zeros, as the ViT reference code) to every
            sequence: `n_patches + 1` vectors. Defaults to `False`.
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
    layer = kmodels.layers.PatchEmbedding(
        (2, 4), 16, padding="same", class_token=True
    )
    layer(np.zeros((4, 7, 8, 1))).shape  # (4, 1 + 4 * 2, 16)
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
        padding="valid",
        dynamic_image_size=False,
        class_token=False,
        **kwargs,
    ):
        # Checked before any sublayer is made; NumPy ints are stored as
        # Python ints, bools and floats are refused.
        owner = "PatchEmbedding"
        patch_size = _patch_size(patch_size, owner)
        embedding_dim = check_int(embedding_dim, "embedding_dim", owner)
        padding = check_choice(padding, "padding", owner, _PADDINGS)
        dynamic_image_size = check_bool(
            dynamic_image_size, "dynamic_image_size", owner
        )
        class_token = check_bool(class_token, "class_token", owner)
        kernel_initializer = keras.initializers.get(kernel_initializer)
        bias_initializer = keras.initializers.get(bias_initializer)
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.embedding_dim = embedding_dim
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.padding = padding
        self.dynamic_image_size = dynamic_image_size
        self.class_token = class_token
        self.projection = keras.layers.Conv2D(
            embedding_dim,
            kernel_size=self.patch_shape,
            strides=self.patch_shape,
            padding="valid",
            data_format="channels_last",
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="projection",
        )

    @property
    def patch_shape(self):
        """`(patch_height, patch_width)`."""
        if isinstance(self.patch_size, int):
            return (self.patch_size, self.patch_size)
        return tuple(self.patch_size)

    @property
    def num_prefix_tokens(self):
        """1 with a class token, else 0: the vectors before the patches."""
        return int(self.class_token)

    def patch_grid(self, height, width):
        """`(rows, cols)` of patches of an image; ints, or int tensors for
        sizes unknown at trace time (TensorFlow)."""
        ph, pw = self.patch_shape
        if self.padding == "same":
            return (height + ph - 1) // ph, (width + pw - 1) // pw
        return height // ph, width // pw

    def _check_shape(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                "PatchEmbedding expects images of shape (batch, height, "
                f"width, channels); got shape {tuple(input_shape)}."
            )
        channels = input_shape[3]
        if self.projection.built and channels is not None:
            # Checked here, before the convolution: TensorFlow's compiled
            # step would raise its own `InvalidArgumentError` instead.
            built = int(self.projection.kernel.shape[2])
            if int(channels) != built:
                raise ValueError(
                    f"PatchEmbedding '{self.name}' was built for images "
                    f"with {built} channels; got {int(channels)} (shape "
                    f"{tuple(input_shape)})."
                )
        if self.padding == "same":
            return
        for axis, size, patch in zip(
            ("height", "width"), input_shape[1:3], self.patch_shape
        ):
            if size is None or not size % patch:
                continue
            if isinstance(self.patch_size, int):
                expected = f"patch_size={self.patch_size}"
            else:
                expected = (
                    f"the patch {axis} {patch} (patch_size="
                    f"{tuple(self.patch_size)})"
                )
            raise ValueError(
                f"PatchEmbedding expects the image {axis} to be a "
                f"multiple of {expected}; got {size}."
            )

    def build(self, input_shape):
        self._check_shape(input_shape)
        shape = tuple(input_shape)
        if self.padding == "same":
            # The projection sees the padded image (`call` pads up to the
            # next multiple of the patch): an image smaller than a patch
            # builds it as a later call on it runs.
            ph, pw = self.patch_shape
            sides = [
                None if size is None else -(-size // patch) * patch
                for size, patch in zip(shape[1:3], (ph, pw))
            ]
            shape = (shape[0], *sides, shape[3])
        self.projection.build(shape)
        if self.class_token:
            # Zeros, as the ViT reference code (big_vision's `cls`).
            self.class_embedding = self.add_weight(
                shape=(1, 1, self.embedding_dim),
                initializer="zeros",
                name="class_token",
            )
        self.built = True

    def __call__(self, *args, **kwargs):
        # Concrete inputs are checked before Keras converts them (JAX casts
        # int64 NumPy ids to int32, wrapping): kmodels.contracts.
        return guarded_call(self, super().__call__, args, kwargs)

    def _check_call_arguments(self, arguments, training):
        if arguments.get("inputs") is not None:
            check_patch_embedding_inputs(self, arguments.get("inputs"))

    def _unchecked_when_traced(self, arguments):
        """What a compiled step that kmodels did not check leaves unrefused
        (`kmodels.contracts.checks`): `call` checks the traced images'
        static shape, so only a height or width unknown when the step was
        traced goes unchecked, and only where patches must divide it."""
        images = arguments.get("inputs")
        if images is None or self.padding == "same":
            return None
        try:
            sides = tuple(images.shape)[1:3]
        except (TypeError, ValueError):  # unknown rank
            sides = (None,)
        if None not in sides:
            return None
        return (
            "an image whose height or width is not a multiple of the patch "
            "size is not refused (the pixels past the last whole patch are "
            "dropped)"
        )

    def call(self, inputs):
        # The static shape of a traced call (JAX, torch, TensorFlow with
        # known sizes) is checked too: a compiled step refuses what an
        # eager call refuses.
        self._check_shape(tuple(inputs.shape))
        # Integer images (e.g. uint8 pixels) are cast to the compute dtype
        # here: Keras only autocasts float inputs, and the convolutions
        # of TensorFlow and torch refuse integers where JAX's accepts them.
        images = ops.cast(inputs, self.compute_dtype)
        if self.padding == "same":
            # Bottom and right only (timm's dynamic_img_pad). The amounts
            # are ints, or int tensors where TensorFlow traces unknown
            # sizes: no Python branch on tensor values.
            shape = ops.shape(images)
            ph, pw = self.patch_shape
            images = ops.pad(
                images,
                [
                    [0, 0],
                    [0, (ph - shape[1] % ph) % ph],
                    [0, (pw - shape[2] % pw) % pw],
                    [0, 0],
                ],
            )
        patches = self.projection(images)
        batch = ops.shape(patches)[0]
        patches = ops.reshape(patches, (batch, -1, self.embedding_dim))
        if not self.class_token:
            return patches
        token = ops.cast(self.class_embedding, patches.dtype)
        token = ops.broadcast_to(token, (batch, 1, self.embedding_dim))
        return ops.concatenate([token, patches], axis=1)

    def compute_output_shape(self, input_shape):
        self._check_shape(input_shape)
        _, height, width, _ = input_shape
        if height is None or width is None:
            patches = None
        else:
            rows, cols = self.patch_grid(height, width)
            patches = rows * cols + self.num_prefix_tokens
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
                "padding": self.padding,
                "dynamic_image_size": self.dynamic_image_size,
                "class_token": self.class_token,
            }
        )
        return config
