"""The seq2seq encoder: token embedding and a bidirectional GRU."""

import keras

from kmodels.seq2seq.masking import padding_mask
from kmodels.seq2seq.masking import without_mask


@keras.saving.register_keras_serializable(package="kmodels")
class Encoder(keras.layers.Layer):
    """Encodes padded token ids into a context sequence.

    `Embedding(mask_zero=True)` then `Bidirectional(GRU(units,
    return_sequences=True), merge_mode="sum")`, as in the TensorFlow "NMT with
    attention" tutorial. Id 0 is padding: the GRUs skip padded steps (their
    state is carried over) and the context is zero there. The padding mask
    (`tokens != 0`) is computed from the ids on every call and attached to the
    output with Keras' mask mechanism; downstream kmodels layers also accept it
    explicitly (`context_mask=`), which is what `Translator` does.

    The sublayers are `embedding` and `rnn`, in the tutorial's order, so
    `set_weights(tutorial_encoder.get_weights())` carries weights over (the
    tutorial's `text_processor` holds no weights).

    Args:
        vocabulary_size: int. Number of token ids, padding (0) included.
        units: int. Size of the embedding, of each GRU and of the context.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `trainable`,
            `dtype`, ...).

    Call arguments:
        tokens: int tensor `(batch, s)`, right-padded with 0.

    Returns:
        Context `(batch, s, units)`, zero at padded positions, with the
        padding mask attached as its Keras mask.

    Example:
    >>> import numpy as np
    >>> encoder = Encoder(vocabulary_size=20, units=8)
    >>> context = encoder(np.array([[3, 4, 5, 0], [6, 7, 0, 0]]))
    >>> tuple(context.shape)
    (2, 4, 8)

    References:
        - [TensorFlow tutorial: Neural machine translation with attention](
          https://www.tensorflow.org/text/tutorials/nmt_with_attention)
    """

    def __init__(self, vocabulary_size, units, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.units = int(units)
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
        self.built = True

    def call(self, tokens):
        mask = padding_mask(tokens)
        x = without_mask(self.embedding(tokens))
        return without_mask(self.rnn(x, mask=mask))

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
