"""The seq2seq encoder: token embedding and a bidirectional GRU."""

import keras
from keras import ops

from kmodels.arguments import check_int
from kmodels.backend.rnn import is_eager_right_padded
from kmodels.contracts.checks import check_ids
from kmodels.layers.sublayers import finish_build
from kmodels.seq2seq.eager_cache import CheckedEagerCall
from kmodels.seq2seq.gru import check_fast_gru
from kmodels.seq2seq.gru import run_grus
from kmodels.seq2seq.masking import padding_mask
from kmodels.seq2seq.masking import without_mask


@keras.saving.register_keras_serializable(package="kmodels")
class Encoder(CheckedEagerCall, keras.layers.Layer):
    """Encodes padded token ids into a context sequence.

    `Embedding(mask_zero=True)` then `Bidirectional(GRU(units,
    return_sequences=True), merge_mode="sum")`, as in the TensorFlow "NMT with
    attention" tutorial, with the tutorial's weight order. Id 0 is padding:
    the GRUs skip padded steps and the context is zero there; the padding
    mask (`tokens != 0`) is attached to the output as its Keras mask.

    Args:
        vocabulary_size: int >= 1. Number of token ids, padding (0)
            included.
        units: int >= 1. Size of the embedding, of each GRU and of the
            context.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `trainable`,
            `dtype`, ...).

    Call arguments:
        tokens: int tensor `(batch, s)`, right-padded with 0.

    Returns:
        Context `(batch, s, units)`, zero at padded positions, with the
        padding mask attached as its Keras mask.

    Example:
    >>> import numpy as np
    >>> from kmodels.seq2seq import Encoder
    >>> encoder = Encoder(vocabulary_size=20, units=8)
    >>> context = encoder(np.array([[3, 4, 5, 0], [6, 7, 0, 0]]))
    >>> tuple(context.shape)
    (2, 4, 8)

    References:
        - [TensorFlow tutorial: Neural machine translation with attention](
          https://www.tensorflow.org/text/tutorials/nmt_with_attention)

    See docs/seq2seq.md, section "Encoder".
    """

    def __init__(self, vocabulary_size, units, **kwargs):
        vocabulary_size = check_int(
            vocabulary_size, "vocabulary_size", "Encoder"
        )
        units = check_int(units, "units", "Encoder")
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
        self.rnn = keras.layers.Bidirectional(
            keras.layers.GRU(
                self.units,
                return_sequences=True,
                recurrent_initializer="glorot_uniform",
                dtype=self.dtype_policy,
            ),
            merge_mode="sum",
            dtype=self.dtype_policy,
            name="rnn",
        )
        self.supports_masking = True

    def build(self, tokens_shape):
        tokens_shape = tuple(tokens_shape)
        self.embedding.build(tokens_shape)
        self.rnn.build(tokens_shape + (self.units,))
        finish_build(self)

    def _check_call_arguments(self, arguments, training):
        tokens = arguments.get("tokens")
        if tokens is not None:
            check_ids(tokens, "tokens", "Encoder", self.vocabulary_size)

    def call(self, tokens):
        mask = padding_mask(tokens)
        x = without_mask(self.embedding(tokens))
        layers = (self.rnn.forward_layer, self.rnn.backward_layer)
        if all(check_fast_gru(layer) for layer in layers):
            # Both directions in one recurrence, on the same variables.
            zeros = ops.zeros((ops.shape(x)[0], self.units), x.dtype)
            (forward, backward), _ = run_grus(
                layers,
                (x, x),
                (mask, mask),
                (zeros, zeros),
                reverse=(False, True),
                zero_output=(True, True),
            )
            return forward + backward
        if is_eager_right_padded(mask):
            return self._right_padded_rnn(x, mask)
        return without_mask(self.rnn(x, mask=mask))

    def _right_padded_rnn(self, x, mask):
        """`self.rnn(x, mask=mask)` for right-padded rows, without a mask.

        Any mask sends torch's GRU to a per-step Python loop. With right
        padding, the forward GRU at real positions is the unmasked GRU, and
        the backward GRU is the unmasked backward GRU over each row rolled
        so that its padding comes first (the backward pass reaches the real
        tokens before the padding). Same weights (`rnn.forward_layer`,
        `rnn.backward_layer`), same arithmetic; padded outputs are zero.
        """
        s = ops.shape(x)[1]
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1, keepdims=True)
        positions = ops.arange(s, dtype="int32")[None, :]
        forward = self.rnn.forward_layer(x)
        # Left-padded copy: row position t holds x[t - (s - length)].
        rolled = ops.mod(positions - (s - lengths), s)
        backward = self.rnn.backward_layer(gather_steps(x, rolled))
        # The backward GRU returns steps in processing order: step k read
        # original position length - 1 - k.
        aligned = ops.clip(lengths - 1 - positions, 0, s - 1)
        backward = gather_steps(backward, aligned)
        return ops.where(mask[..., None], forward + backward, 0.0)

    def compute_mask(self, tokens, mask=None):
        return padding_mask(tokens)

    def compute_output_shape(self, tokens_shape):
        return tuple(tokens_shape) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"vocabulary_size": self.vocabulary_size, "units": self.units}
        )
        return config


def gather_steps(x, index):
    index = ops.broadcast_to(index[..., None], ops.shape(x))
    return ops.take_along_axis(x, index, axis=1)
