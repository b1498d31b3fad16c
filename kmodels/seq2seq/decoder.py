"""The seq2seq decoder: embedding, GRU, cross-attention, output logits."""

import keras
from keras import ops

from kmodels.arguments import check_int
from kmodels.backend.rnn import is_eager_right_padded
from kmodels.contracts.checks import check_attention_inputs
from kmodels.layers.sublayers import finish_build
from kmodels.seq2seq.cross_attention import CrossAttention
from kmodels.seq2seq.eager_cache import CheckedEagerCall
from kmodels.seq2seq.encoder import gather_steps
from kmodels.seq2seq.gru import check_fast_gru
from kmodels.seq2seq.gru import run_grus
from kmodels.seq2seq.masking import padding_mask
from kmodels.seq2seq.masking import without_mask


@keras.saving.register_keras_serializable(package="kmodels")
class Decoder(CheckedEagerCall, keras.layers.Layer):
    """Predicts next-token logits from target ids and an encoder context.

    `Embedding(mask_zero=True)`, `GRU(units, return_sequences=True,
    return_state=True)`, `CrossAttention(units)` over the context, then
    `Dense(vocabulary_size)`, as in the TensorFlow "NMT with attention"
    tutorial (same weight order). Id 0 in `x` is padding: the GRU skips it.

    Args:
        vocabulary_size: int >= 1. Number of target token ids (logits per
            step).
        units: int >= 1. Embedding, GRU and attention size.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        context: float `(batch, s, units)` from `Encoder`.
        x: int `(batch, t)` target ids, right-padded with 0.
        state: optional float `(batch, units)`, initial GRU state (zeros).
        return_state: bool. Also return the GRU state after the last real
            token.
        context_mask: optional boolean `(batch, s)`. Defaults to the Keras
            mask that `Encoder` attached to `context`.
        return_attention_weights: bool. Also return the attention weights
            `(batch, t, s)`.

    Returns:
        `logits (batch, t, vocabulary_size)`, then `state` and the attention
        weights when asked, in that order (a symbolic call too).

    Example:
    >>> from kmodels.seq2seq import Decoder, Encoder
    >>> tokens = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    >>> context = Encoder(vocabulary_size=20, units=8)(tokens)
    >>> decoder = Decoder(vocabulary_size=30, units=8)
    >>> logits, state = decoder(context, np.array([[2, 9], [2, 0]]),
    ...                         context_mask=tokens != 0, return_state=True)
    >>> tuple(logits.shape), tuple(state.shape)
    ((2, 2, 30), (2, 8))

    References:
        - [Bahdanau et al., 2015](https://arxiv.org/abs/1409.0473)
        - [TensorFlow tutorial: Neural machine translation with attention](
          https://www.tensorflow.org/text/tutorials/nmt_with_attention)

    See docs/seq2seq.md, section "Decoder".
    """

    def __init__(self, vocabulary_size, units, **kwargs):
        vocabulary_size = check_int(
            vocabulary_size, "vocabulary_size", "Decoder"
        )
        units = check_int(units, "units", "Decoder")
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.units = units
        self.embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.units,
            mask_zero=True,
            dtype=self.dtype_policy,
            name="embedding",
        )
        self.rnn = keras.layers.GRU(
            self.units,
            return_sequences=True,
            return_state=True,
            recurrent_initializer="glorot_uniform",
            dtype=self.dtype_policy,
            name="rnn",
        )
        self.attention = CrossAttention(
            self.units, dtype=self.dtype_policy, name="attention"
        )
        self.output_layer = keras.layers.Dense(
            self.vocabulary_size, dtype=self.dtype_policy, name="output_layer"
        )
        self.supports_masking = True

    def build(self, context_shape, x_shape, state_shape=None):
        x_shape = tuple(x_shape)
        hidden_shape = x_shape + (self.units,)
        self.embedding.build(x_shape)
        self.rnn.build(hidden_shape)
        self.attention.build(hidden_shape, tuple(context_shape))
        self.output_layer.build(hidden_shape)
        finish_build(self)

    def _check_call_arguments(self, arguments, training):
        check_attention_inputs(
            "Decoder",
            arguments.get("x"),
            arguments.get("context"),
            arguments.get("context_mask"),
            ids=self.vocabulary_size,
        )

    def call(
        self,
        context,
        x,
        state=None,
        return_state=False,
        context_mask=None,
        return_attention_weights=False,
        project=True,
    ):
        x_mask = padding_mask(x)
        h = without_mask(self.embedding(x))
        if check_fast_gru(self.rnn):
            if state is None:
                state = ops.zeros((ops.shape(h)[0], self.units), h.dtype)
            (h,), (state,) = run_grus(
                (self.rnn,),
                (h,),
                (x_mask,),
                (state,),
                reverse=(False,),
                zero_output=(False,),
            )
        elif is_eager_right_padded(x_mask):
            h, state = self._right_padded_rnn(h, state, x_mask)
        else:
            h, state = self.rnn(h, initial_state=state, mask=x_mask)
        return self.attend(
            h,
            state,
            context,
            context_mask,
            return_state=return_state,
            return_attention_weights=return_attention_weights,
            project=project,
        )

    def attend(
        self,
        h,
        state,
        context,
        context_mask,
        return_state=False,
        return_attention_weights=False,
        project=True,
    ):
        """The part of `call` after the GRU: cross-attention over `context`
        and the output logits, from the GRU's outputs `h (batch, t, units)`
        and final `state`; returns what `call` returns. `Translator` calls
        it with GRU outputs it computed in one recurrence with the
        encoder's. With `project=False`, the output layer's input
        `(batch, t, units)` replaces the logits (`Translator`'s training
        with `fused_loss`, which projects only the real positions)."""
        h, weights = self.attention(
            without_mask(h),
            context,
            context_mask=context_mask,
            return_attention_weights=True,
        )
        # No mask on the logits: Keras losses would reweight by it, and
        # `masked_loss` already excludes padding.
        h = without_mask(h)
        logits = without_mask(self.output_layer(h)) if project else h
        outputs = (logits,)
        if return_state:
            outputs += (state,)
        if return_attention_weights:
            outputs += (weights,)
        return outputs[0] if len(outputs) == 1 else outputs

    def _right_padded_rnn(self, h, state, mask):
        """`self.rnn(h, initial_state=state, mask=mask)` for right-padded
        rows, run without a mask (torch's GRU is a per-step Python loop
        with any mask). At real steps the outputs are the unmasked GRU's; a
        padded step repeats the last real output (zeros before any), and the
        state is the one after the last real step, as Keras' masked GRU
        does."""
        if state is None:
            state = ops.zeros((ops.shape(h)[0], self.units), h.dtype)
        seq, _ = self.rnn(h, initial_state=state)
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1, keepdims=True)
        last = ops.maximum(lengths - 1, 0)
        last_output = gather_steps(seq, last)[:, 0]
        started = lengths > 0
        carried = ops.where(started, last_output, 0.0)
        seq = ops.where(mask[..., None], seq, carried[:, None, :])
        return seq, ops.where(started, last_output, state)

    def compute_mask(self, context, previous_mask=None):
        return None

    def compute_output_shape(
        self,
        context_shape,
        x_shape,
        state_shape=None,
        return_state=False,
        return_attention_weights=False,
    ):
        """The shape of `logits`, or the tuple of shapes `call` returns
        with the same `return_state` and `return_attention_weights`."""
        x_shape = tuple(x_shape)
        shapes = (x_shape + (self.vocabulary_size,),)
        if return_state:
            shapes += ((x_shape[0], self.units),)
        if return_attention_weights:
            shapes += (x_shape[:2] + (tuple(context_shape)[1],),)
        return shapes[0] if len(shapes) == 1 else shapes

    def compute_output_spec(
        self,
        context,
        x,
        state=None,
        return_state=False,
        context_mask=None,
        return_attention_weights=False,
    ):
        # Keras' default spec passes only the tensor shapes to
        # `compute_output_shape`, so a functional call would drop the
        # state and the weights that an eager call with the same flags
        # returns. Every output is in the compute dtype, as in `call`.
        shapes = self.compute_output_shape(
            context.shape,
            x.shape,
            return_state=return_state,
            return_attention_weights=return_attention_weights,
        )
        if not (return_state or return_attention_weights):
            return keras.KerasTensor(shapes, dtype=self.compute_dtype)
        return tuple(
            keras.KerasTensor(shape, dtype=self.compute_dtype)
            for shape in shapes
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {"vocabulary_size": self.vocabulary_size, "units": self.units}
        )
        return config
