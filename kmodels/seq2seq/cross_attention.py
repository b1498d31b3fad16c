"""Cross-attention from decoder states to the encoder context."""

import keras
from keras import ops

from kmodels.arguments import check_int
from kmodels.contracts.checks import check_attention_inputs
from kmodels.layers.sublayers import finish_build
from kmodels.seq2seq.eager_cache import CheckedEagerCall
from kmodels.seq2seq.masking import masks_hidden


@keras.saving.register_keras_serializable(package="kmodels")
class CrossAttention(CheckedEagerCall, keras.layers.Layer):
    """Single-head attention over a context, with a residual and LayerNorm.

    `MultiHeadAttention(key_dim=units, num_heads=1)` with the decoder states
    as query and the context as key and value, then `Add` (residual) and
    `LayerNormalization`, as in the TensorFlow "NMT with attention" tutorial.
    Only the context is masked: padded context positions get zero attention;
    query rows are never masked. The Keras masks of `x` and `context` are
    left as they were, and the attention weights are returned, never stored.

    Args:
        units: int >= 1. Key dimension of the attention (the tutorial uses
            the model's `units`).
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        x: float tensor `(batch, t, dim)`, the query.
        context: float tensor `(batch, s, dim_context)`.
        context_mask: optional boolean `(batch, s)`, True at real positions.
            Defaults to the Keras mask of `context` (set by `Encoder`), else
            every position is attended.
        return_attention_weights: bool. Also return the attention weights
            `(batch, t, s)`, averaged over heads.

    Returns:
        `(batch, t, dim)`, and the weights when asked (also from a
        functional, symbolic call), in the compute dtype.

    Example:
    >>> from kmodels.seq2seq import CrossAttention
    >>> layer = CrossAttention(units=8)
    >>> x = np.zeros((2, 3, 8), "float32")
    >>> context = np.ones((2, 5, 8), "float32")
    >>> mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    >>> y, w = layer(x, context, context_mask=mask,
    ...              return_attention_weights=True)
    >>> tuple(w.shape)
    (2, 3, 5)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [TensorFlow tutorial: Neural machine translation with attention](
          https://www.tensorflow.org/text/tutorials/nmt_with_attention)

    See docs/seq2seq.md, section "CrossAttention".
    """

    def __init__(self, units, **kwargs):
        units = check_int(units, "units", "CrossAttention")
        super().__init__(**kwargs)
        self.units = units
        self.mha = keras.layers.MultiHeadAttention(
            key_dim=self.units,
            num_heads=1,
            dtype=self.dtype_policy,
            name="mha",
        )
        self.layernorm = keras.layers.LayerNormalization(
            dtype=self.dtype_policy, name="layernorm"
        )
        self.add = keras.layers.Add(dtype=self.dtype_policy, name="add")
        self.supports_masking = True

    def build(self, x_shape, context_shape):
        x_shape = tuple(x_shape)
        self.mha.build(x_shape, tuple(context_shape))
        self.layernorm.build(x_shape)
        self.add.build([x_shape, x_shape])
        finish_build(self)

    def _check_call_arguments(self, arguments, training):
        check_attention_inputs(
            "CrossAttention",
            arguments.get("x"),
            arguments.get("context"),
            arguments.get("context_mask"),
        )

    def call(
        self, x, context, context_mask=None, return_attention_weights=False
    ):
        if context_mask is not None:
            context_mask = ops.cast(context_mask, "bool")
        with masks_hidden(x, context):
            attended, scores = self.mha(
                query=x,
                value=context,
                value_mask=context_mask,
                return_attention_scores=True,
            )
            y = self.layernorm(self.add([x, attended]))
        if return_attention_weights:
            return y, ops.mean(scores, axis=1)
        return y

    def compute_mask(self, x, previous_mask=None):
        # Keeps the query's mask, as a residual block does.
        return previous_mask

    def compute_output_shape(
        self, x_shape, context_shape, return_attention_weights=False
    ):
        """The shape of `y`, and of the weights `(batch, t, s)` when
        `return_attention_weights`, as `call` returns them."""
        x_shape = tuple(x_shape)
        if return_attention_weights:
            return x_shape, x_shape[:2] + (tuple(context_shape)[1],)
        return x_shape

    def compute_output_spec(
        self, x, context, context_mask=None, return_attention_weights=False
    ):
        # Keras' default spec passes only the tensor shapes to
        # `compute_output_shape`, so a functional call would drop the
        # weights that an eager call with the same flag returns.
        shapes = self.compute_output_shape(
            x.shape,
            context.shape,
            return_attention_weights=return_attention_weights,
        )
        if not return_attention_weights:
            return keras.KerasTensor(shapes, dtype=self.compute_dtype)
        return tuple(
            keras.KerasTensor(shape, dtype=self.compute_dtype)
            for shape in shapes
        )

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config
