import numbers

import keras
import keras_hub
import numpy as np
from keras import ops

from kmodels.arguments import check_choice
from kmodels.arguments import check_float
from kmodels.arguments import check_int
from kmodels.contracts.checks import check_positional_embedding_inputs
from kmodels.contracts.checks import guarded_call
from kmodels.layers.patch_embedding import PatchEmbedding
from kmodels.layers.position_resampling import linear_weights
from kmodels.layers.position_resampling import resample_grid

_POSITIONS = ("learned", "sine")
_MERGES = ("add", "concat")


def _grid(value, name, owner):
    """`(rows, cols)` from a pair of ints or a square int, or a clear
    error."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return tuple(check_int(v, name, owner) for v in value)
    if isinstance(value, (tuple, list)):
        raise ValueError(
            f"{owner} expects {name} to be (rows, cols) of the patch grid "
            f"or a square number of patches; got {value!r}"
        )
    n = check_int(value, name, owner)
    side = int(round(n**0.5))
    if side * side != n:
        raise ValueError(
            f"{owner} expects {name} to be (rows, cols) of the patch grid "
            f"or a square number of patches; got {n}, which is not a "
            "square: pass the grid"
        )
    return (side, side)


@keras.saving.register_keras_serializable(package="kmodels")
class PositionalEmbedding(keras.layers.Layer):
    """Any embedding layer plus learned or sinusoidal positions.

    Calls the wrapped `embedding` on the inputs and merges its output with
    position vectors from `keras_hub.layers.PositionEmbedding` (learned) or
    `keras_hub.layers.SinePositionEncoding` (fixed). The wrapped layer may be
    a token `keras.layers.Embedding` or an image patch embedding such as
    `kmodels.layers.PatchEmbedding`; its mask (e.g. `mask_zero=True`) is
    propagated.

    Args:
        embedding: a `keras.layers.Layer` mapping the inputs to
            `(batch, seq, dim)`.
        sequence_length: int >= 1, the most positions an input may have
            (the learned table's rows; checked for both variants).
        position: `"learned"` or `"sine"`. Defaults to `"learned"`.
        merge: `"add"` (output dim `dim`) or `"concat"` (output dim
            `2 * dim`). Defaults to `"add"`.
        position_initializer: initializer of the learned table. Defaults to
            `"glorot_uniform"`, as `keras_hub.layers.PositionEmbedding`.
        max_wavelength: finite number > 0, the sine variant's longest
            wavelength. Defaults to `10000` (Vaswani et al., 2017).
        **kwargs: other keyword arguments passed to `keras.layers.Layer`,
            including `name`, `trainable`, `dtype` etc.

    Call arguments:
        inputs: whatever `embedding` accepts (ids or images).
        start_index: int >= 0 or int tensor, the position of the first
            element of `inputs` (step-by-step decoding). Defaults to `0`.

    Example:

    ```python
    layer = kmodels.layers.PositionalEmbedding(
        keras.layers.Embedding(1000, 32, mask_zero=True),
        sequence_length=50,
    )
    x = layer(np.array([[5, 7, 9, 0, 0]]))  # (1, 5, 32); mask [[1,1,1,0,0]]
    ```

    References:
     - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
     - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)

    See docs/position_embedding.md, section "The right composition".
    """

    def __init__(
        self,
        embedding,
        sequence_length,
        position="learned",
        merge="add",
        position_initializer="glorot_uniform",
        max_wavelength=10000,
        **kwargs,
    ):
        # Every argument is checked before any sublayer is made.
        owner = "PositionalEmbedding"
        sequence_length = check_int(sequence_length, "sequence_length", owner)
        position = check_choice(position, "position", owner, _POSITIONS)
        merge = check_choice(merge, "merge", owner, _MERGES)
        # sin(p / max_wavelength ** (2i / dim)): a base <= 0 gives NaN or
        # infinite frequencies.
        max_wavelength = check_float(
            max_wavelength, "max_wavelength", owner, 0, exclusive_minimum=True
        )
        if max_wavelength == int(max_wavelength):
            max_wavelength = int(max_wavelength)
        if isinstance(embedding, dict):
            embedding = keras.saving.deserialize_keras_object(embedding)
        if not isinstance(embedding, keras.layers.Layer):
            raise TypeError(
                "PositionalEmbedding expects `embedding` to be a "
                "keras.layers.Layer (e.g. keras.layers.Embedding(...)); got "
                f"{type(embedding).__name__}."
            )
        position_initializer = keras.initializers.get(position_initializer)
        super().__init__(**kwargs)
        self.embedding = embedding
        self.sequence_length = sequence_length
        self.position = position
        self.merge = merge
        self.position_initializer = position_initializer
        self.max_wavelength = max_wavelength
        if position == "learned":
            self.position_embedding = keras_hub.layers.PositionEmbedding(
                sequence_length=self.sequence_length,
                initializer=self.position_initializer,
                dtype=self.dtype_policy,
                name="position_embedding",
            )
        else:
            self.position_embedding = keras_hub.layers.SinePositionEncoding(
                max_wavelength=max_wavelength,
                dtype=self.dtype_policy,
                name="position_embedding",
            )
        # The position layers only read the embedded tensor's shape. Saying
        # they support masking stops Keras warning, on every trace, that
        # they drop the mask of the embedded tensor they are given.
        self.position_embedding.supports_masking = True

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if not self.embedding.built:
            self.embedding.build(input_shape)
        embedded_shape = tuple(self.embedding.compute_output_shape(input_shape))
        if len(embedded_shape) != 3:
            raise ValueError(
                "PositionalEmbedding expects `embedding` to output "
                "(batch, seq, dim); "
                f"{type(self.embedding).__name__} outputs shape "
                f"{embedded_shape} for inputs of shape {input_shape}."
            )
        self._check_length(embedded_shape[1])
        self.position_embedding.build(embedded_shape)
        self.built = True

    def _check_length(self, length):
        if length is not None and length > self.sequence_length:
            raise ValueError(
                f"PositionalEmbedding holds {self.sequence_length} positions "
                f"(`sequence_length`); the inputs have {length}."
            )

    def __call__(self, *args, **kwargs):
        # Concrete inputs are checked before Keras converts them (JAX casts
        # int64 NumPy ids to int32, wrapping): kmodels.contracts.
        return guarded_call(self, super().__call__, args, kwargs)

    def _check_call_arguments(self, arguments, training):
        check_positional_embedding_inputs(self, arguments, training)

    def call(self, inputs, start_index=0):
        embedded = self.embedding(inputs)
        if isinstance(start_index, (numbers.Number, np.generic, str)):
            # A Python or NumPy number is checked here, the same on every
            # backend: JAX's slice would silently clamp an out-of-range
            # start, torch would accept 2.5. Tensors are used as they are.
            start_index = check_int(
                start_index, "start_index", "PositionalEmbedding", 0
            )
            length = embedded.shape[1]
            if length is not None and start_index + length > (
                self.sequence_length
            ):
                raise ValueError(
                    f"PositionalEmbedding holds {self.sequence_length} "
                    "positions (`sequence_length`); the inputs need "
                    f"positions {start_index} to {start_index + length - 1}"
                    f" (start_index={start_index}, {length} positions)."
                )
        positions = self.position_embedding(embedded, start_index=start_index)
        # The wrapped embedding keeps its own dtype policy (often float32
        # under a mixed one): both halves are cast to this layer's compute
        # dtype, the dtype `compute_output_spec` announces, so TensorFlow
        # does not refuse a half + float sum and JAX does not promote it.
        embedded = ops.cast(embedded, self.compute_dtype)
        positions = ops.cast(positions, self.compute_dtype)
        if self.merge == "add":
            return embedded + positions
        return ops.concatenate([embedded, positions], axis=-1)

    def resized(self, sequence_length, from_grid=None):
        """A new layer holding `sequence_length` positions.

        The new layer wraps the same `embedding` (the same layer and
        weights, shared with this one) with the same settings; this layer
        is left unchanged.

        - Learned token positions are interpolated linearly over positions
          (pixel centres, as torch's `F.interpolate(mode="linear",
          align_corners=False)` and timm: row `i` samples the old table at
          `(i + 0.5) * old / new - 0.5`).
        - Learned positions around a `PatchEmbedding` form a row-major grid
          of patches: the grid is resampled bicubic (torch's
          `F.interpolate(mode="bicubic", align_corners=False)`, timm's
          default). `sequence_length` is then the new grid, `(rows, cols)`,
          or an int `n` for a square grid of `sqrt(n)` sides.
        - Sine positions need nothing: they are computed for any length.

        The same size gives the same table exactly. The resampling runs
        once, in float64 NumPy, so every backend gets the same table.

        Args:
            sequence_length: int >= 1; or, around a `PatchEmbedding`, a
                tuple `(rows, cols)` of the new patch grid.
            from_grid: `(rows, cols)` of the trained grid around a
                `PatchEmbedding`, needed when `self.sequence_length` is not
                a square number. Defaults to a square grid.

        Returns:
            A `PositionalEmbedding`, built when this one is.

        Raises:
            ValueError: a length that is not an int >= 1, a grid that is
                not two ints >= 1 (or a length that is no square where a
                grid is needed), or `from_grid` that does not hold
                `self.sequence_length` positions.

        Example:

        ```python
        model = keras.saving.load_model("trained_at_64.keras")
        layer = model.get_layer("positional_embedding")
        ids = keras.Input((128,), dtype="int32")
        longer = layer.resized(128)  # positions interpolated 64 -> 128
        x = longer(ids)  # then the rest of the model, and fit
        ```
        """
        owner = "PositionalEmbedding.resized"
        patches = isinstance(self.embedding, PatchEmbedding)
        if patches:
            new_grid = _grid(sequence_length, "sequence_length", owner)
            old_grid = _grid(
                self.sequence_length if from_grid is None else from_grid,
                "from_grid",
                owner,
            )
            if old_grid[0] * old_grid[1] != self.sequence_length:
                raise ValueError(
                    f"{owner} expects from_grid to hold the layer's "
                    f"{self.sequence_length} positions; got {old_grid}"
                )
            length = new_grid[0] * new_grid[1]
        else:
            length = check_int(sequence_length, "sequence_length", owner)
        config = self.get_config()
        config.pop("embedding")
        config.pop("build_config", None)
        config["sequence_length"] = length
        # Not through from_config: the new layer wraps this very embedding.
        layer = type(self)(self.embedding, **config)
        if not self.built or self.position != "learned":
            return layer
        table = self.position_embedding.position_embeddings
        old = keras.ops.convert_to_numpy(table).astype(np.float64)
        if patches:
            new = resample_grid(old, old_grid, new_grid)
        else:
            new = linear_weights(self.sequence_length, length) @ old
        layer.position_embedding.build((None, length, old.shape[-1]))
        layer.position_embedding.position_embeddings.assign(
            new.astype(keras.backend.standardize_dtype(table.dtype))
        )
        layer.built = True
        return layer

    def compute_mask(self, inputs, mask=None):
        if not self.embedding.supports_masking:
            return None
        return self.embedding.compute_mask(inputs, mask)

    def compute_output_shape(self, input_shape):
        shape = tuple(self.embedding.compute_output_shape(tuple(input_shape)))
        if self.merge == "concat" and shape[-1] is not None:
            shape = shape[:-1] + (2 * shape[-1],)
        return shape

    def get_config(self):
        config = super().get_config()
        embedding = keras.saving.serialize_keras_object(self.embedding)
        # This layer's `build` builds the embedding (under its name scope:
        # the weights keep their paths), so the config never says how, and
        # `from_config(config).get_config() == config` built or not.
        embedding.pop("build_config", None)
        config.update(
            {
                "embedding": embedding,
                "sequence_length": self.sequence_length,
                "position": self.position,
                "merge": self.merge,
                "position_initializer": keras.initializers.serialize(
                    self.position_initializer
                ),
                "max_wavelength": self.max_wavelength,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        inner = dict(config["embedding"])
        # Left unbuilt, the embedding is built by this layer's `build`, under
        # its name scope, as when it was first made: its weights keep their
        # paths (`positional_embedding/embedding/embeddings`, what a layout
        # map names) through a `.keras` round trip.
        inner.pop("build_config", None)
        config["embedding"] = keras.saving.deserialize_keras_object(inner)
        return cls(**config)
