import numbers

import keras
import numpy as np
from keras import ops

from kmodels.arguments import check_choice
from kmodels.arguments import check_float
from kmodels.arguments import check_int
from kmodels.contracts.checks import UNCHECKED_IDS
from kmodels.contracts.checks import check_positional_embedding_inputs
from kmodels.contracts.checks import guarded_call
from kmodels.layers.patch_embedding import PatchEmbedding
from kmodels.layers.position_resampling import cubic_weights
from kmodels.layers.position_resampling import cubic_weights_tensor
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


def _is_dynamic_grid(embedding, position):
    """Learned positions around a `PatchEmbedding` whose images change
    size: a grid resampled at every call."""
    return (
        position == "learned"
        and isinstance(embedding, PatchEmbedding)
        and embedding.dynamic_image_size
    )


def _trained_grid(embedding, sequence_length, grid, owner):
    """`(rows, cols)` of the learned grid of positions around a
    `PatchEmbedding`: `grid`, or the square of the positions after the
    class token; or a clear error."""
    if not isinstance(embedding, PatchEmbedding):
        raise ValueError(
            f"{owner}: `grid` is the patch grid of a PatchEmbedding; the "
            f"embedding is a {type(embedding).__name__}: leave grid=None."
        )
    prefix = embedding.num_prefix_tokens
    count = sequence_length - prefix
    where = (
        f"sequence_length={sequence_length} (1 class token and {count} patches)"
        if prefix
        else f"sequence_length={sequence_length}"
    )
    if grid is None:
        side = int(round(max(count, 0) ** 0.5))
        if count < 1 or side * side != count:
            raise ValueError(
                f"{owner}: learned positions resampled to each image size "
                f"form a grid of patches; {where} is not a square grid: "
                "pass grid=(rows, cols)."
            )
        return (side, side)
    if not isinstance(grid, (tuple, list)) or len(grid) != 2:
        raise ValueError(
            f"{owner}: `grid` must be (rows, cols) of the patch grid; got "
            f"{grid!r}."
        )
    grid = tuple(check_int(v, "grid", owner) for v in grid)
    if grid[0] * grid[1] != count:
        raise ValueError(
            f"{owner}: `grid` {grid} holds {grid[0] * grid[1]} positions; "
            f"{where} holds {count} patch positions."
        )
    return grid


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
            (the learned table's rows; checked for both variants). Around
            a `PatchEmbedding` with `dynamic_image_size=True`: the
            positions of the trained grid (plus its class token), which
            any image size resamples; not a bound.
        position: `"learned"` or `"sine"`. Defaults to `"learned"`.
        merge: `"add"` (output dim `dim`) or `"concat"` (output dim
            `2 * dim`). Defaults to `"add"`.
        position_initializer: initializer of the learned table. Defaults to
            `"glorot_uniform"`, as `keras_hub.layers.PositionEmbedding`.
        max_wavelength: finite number > 0, the sine variant's longest
            wavelength. Defaults to `10000` (Vaswani et al., 2017).
        grid: `(rows, cols)` of the patch grid that the learned positions
            form, around a `PatchEmbedding` (after its class token, if
            any); needed when that grid is not square. Defaults to `None`:
            a square grid.
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

    Around a `PatchEmbedding(..., dynamic_image_size=True)`, learned
    positions are a grid trained at one image size and resampled bicubic
    to the patch grid of each call (the class token's position is kept):

    ```python
    layer = kmodels.layers.PositionalEmbedding(
        kmodels.layers.PatchEmbedding(
            4, 32, dynamic_image_size=True, class_token=True
        ),
        sequence_length=1 + 8 * 8,  # trained at 32x32: an 8x8 grid
    )
    layer(np.zeros((2, 32, 32, 3))).shape  # (2, 65, 32)
    layer(np.zeros((2, 48, 40, 3))).shape  # (2, 1 + 12 * 10, 32)
    ```

    References:
     - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
     - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)

    See docs/position_embedding.md, sections "The right composition" and
    "Another image size: `dynamic_image_size`".
    """

    def __init__(
        self,
        embedding,
        sequence_length,
        position="learned",
        merge="add",
        position_initializer="glorot_uniform",
        max_wavelength=10000,
        grid=None,
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
        trained_grid = None
        if grid is not None or _is_dynamic_grid(embedding, position):
            trained_grid = _trained_grid(
                embedding, sequence_length, grid, owner
            )
            grid = None if grid is None else trained_grid
        position_initializer = keras.initializers.get(position_initializer)
        super().__init__(**kwargs)
        self.embedding = embedding
        self.sequence_length = sequence_length
        self.position = position
        self.merge = merge
        self.position_initializer = position_initializer
        self.max_wavelength = max_wavelength
        self.grid = grid
        # Images of any size: learned positions are resampled to each
        # call's patch grid, sine positions computed for its length.
        self._dynamic = isinstance(embedding, PatchEmbedding) and (
            embedding.dynamic_image_size
        )
        self._trained_grid = trained_grid
        # keras-hub (which imports TensorFlow) is imported when a layer is
        # made, not by `import kmodels`.
        import keras_hub

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
        if not self._dynamic:
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
        if self._dynamic:
            # Here, not in `call`: the same message on every backend, not
            # wrapped in Keras' note on the failing call.
            start_index = kwargs.get(
                "start_index", args[1] if len(args) > 1 else 0
            )
            if not isinstance(start_index, (numbers.Integral, np.integer)) or (
                start_index != 0
            ):
                raise ValueError(
                    "PositionalEmbedding: `start_index` must be 0 around a "
                    "PatchEmbedding with dynamic_image_size=True (its "
                    f"positions are a grid of patches); got {start_index!r}."
                )
        # Concrete inputs are checked before Keras converts them (JAX casts
        # int64 NumPy ids to int32, wrapping): kmodels.contracts.
        return guarded_call(self, super().__call__, args, kwargs)

    def _check_call_arguments(self, arguments, training):
        check_positional_embedding_inputs(self, arguments, training)

    def _unchecked_when_traced(self, arguments):
        """What a compiled step that kmodels did not check leaves unrefused
        (`kmodels.contracts.checks`): ids and a start index need their
        values; a wrapped layer that says what its traced call leaves
        unchecked (`PatchEmbedding`) speaks for the images."""
        start = arguments.get("start_index")
        inner = getattr(self.embedding, "_unchecked_when_traced", None)
        if inner is None or not (start is None or isinstance(start, int)):
            return UNCHECKED_IDS
        return inner({"inputs": arguments.get("inputs")})

    def call(self, inputs, start_index=0):
        embedded = self.embedding(inputs)
        if self._dynamic:
            positions = self._positions_of_images(inputs, embedded)
        else:
            positions = self._positions(embedded, start_index)
        # The wrapped embedding keeps its own dtype policy (often float32
        # under a mixed one): both halves are cast to this layer's compute
        # dtype, the dtype `compute_output_spec` announces, so TensorFlow
        # does not refuse a half + float sum and JAX does not promote it.
        embedded = ops.cast(embedded, self.compute_dtype)
        positions = ops.cast(positions, self.compute_dtype)
        if self.merge == "add":
            return embedded + positions
        return ops.concatenate([embedded, positions], axis=-1)

    def _positions(self, embedded, start_index):
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
        return self.position_embedding(embedded, start_index=start_index)

    def _positions_of_images(self, images, embedded):
        """Positions for images of any size (`dynamic_image_size`);
        `start_index` is 0 (checked in `__call__`)."""
        if self.position != "learned":
            # Sine positions are computed for the call's length.
            return self.position_embedding(embedded)
        shape = ops.shape(images)
        grid = self._resampled_grid(*self.embedding.patch_grid(*shape[1:3]))
        return ops.broadcast_to(grid[None], ops.shape(embedded))

    def _resampled_grid(self, rows, cols):
        """The learned `(n, dim)` table with its grid resampled bicubic to
        `(rows, cols)` (ints, or int tensors when TensorFlow traces unknown
        sizes); the class token's position is kept as it is."""
        table = ops.convert_to_tensor(
            self.position_embedding.position_embeddings
        )
        old_rows, old_cols = self._trained_grid
        static = isinstance(rows, (int, np.integer)) and isinstance(
            cols, (int, np.integer)
        )
        if static and (rows, cols) == (old_rows, old_cols):
            return table
        dtype = keras.backend.standardize_dtype(table.dtype)

        def weights(old, new):
            # Separable bicubic: one (new, old) matrix per axis. Known
            # sizes get the float64 NumPy matrix (a constant of the trace);
            # unknown ones the same formula in keras.ops.
            if isinstance(new, (int, np.integer)):
                return ops.convert_to_tensor(
                    cubic_weights(old, int(new)).astype(dtype)
                )
            return cubic_weights_tensor(old, new, dtype)

        prefix = self.embedding.num_prefix_tokens
        dim = table.shape[-1]
        grid = ops.reshape(table[prefix:], (old_rows, old_cols, dim))
        grid = ops.einsum("ih,hwd->iwd", weights(old_rows, rows), grid)
        grid = ops.einsum("jw,iwd->ijd", weights(old_cols, cols), grid)
        grid = ops.reshape(grid, (-1, dim))
        if not prefix:
            return grid
        return ops.concatenate([table[:prefix], grid], axis=0)

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
          or an int `n` for a square grid of `sqrt(n)` sides; the class
          token's position (`class_token=True`) is kept as it is, before
          the grid.
        - Sine positions need nothing: they are computed for any length.

        The same size gives the same table exactly. The resampling runs
        once, in float64 NumPy, so every backend gets the same table.

        Args:
            sequence_length: int >= 1; or, around a `PatchEmbedding`, a
                tuple `(rows, cols)` of the new patch grid.
            from_grid: `(rows, cols)` of the trained grid around a
                `PatchEmbedding`, needed when its positions (after the
                class token) are not a square number. Defaults to
                `self.grid`, else a square grid.

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
            prefix = self.embedding.num_prefix_tokens
            count = self.sequence_length - prefix
            if from_grid is None:
                from_grid = self.grid
            new_grid = _grid(sequence_length, "sequence_length", owner)
            old_grid = _grid(
                count if from_grid is None else from_grid,
                "from_grid",
                owner,
            )
            if old_grid[0] * old_grid[1] != count:
                after = " after its class token" if prefix else ""
                raise ValueError(
                    f"{owner} expects from_grid to hold the layer's "
                    f"{count} positions{after}; got {old_grid}"
                )
            length = new_grid[0] * new_grid[1] + prefix
        else:
            length = check_int(sequence_length, "sequence_length", owner)
        config = self.get_config()
        config.pop("embedding")
        config.pop("build_config", None)
        config["sequence_length"] = length
        if patches:
            config["grid"] = new_grid
        # Not through from_config: the new layer wraps this very embedding.
        layer = type(self)(self.embedding, **config)
        if not self.built or self.position != "learned":
            return layer
        table = self.position_embedding.position_embeddings
        old = keras.ops.convert_to_numpy(table).astype(np.float64)
        if patches:
            # The class token's position is kept as it is.
            new = np.concatenate(
                [old[:prefix], resample_grid(old[prefix:], old_grid, new_grid)]
            )
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
                "grid": self.grid,
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
