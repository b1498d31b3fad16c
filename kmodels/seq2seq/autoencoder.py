"""Encoder pretraining: reconstruct the input ids from the context."""

import keras

from kmodels.seq2seq.encoder import Encoder
from kmodels.seq2seq.masking import without_mask


@keras.saving.register_keras_serializable(package="kmodels")
class Autoencoder(keras.Model):
    """An `Encoder` plus `Dense(vocabulary_size)`: logits for the input ids.

    Trained with `masked_loss(tokens, model(tokens))`, it pretrains the
    encoder on unlabelled text. Afterwards, hand `autoencoder.encoder` to
    `Translator(..., encoder=...)`, optionally frozen
    (`encoder.trainable = False`, then compile).

    Args:
        encoder_or_vocabulary_size: an `Encoder` to train, or the vocabulary
            size of a new one.
        units: int. Needed with a vocabulary size; with an encoder it may be
            omitted (it must match if given).
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        tokens: int `(batch, s)`, right-padded with 0.

    Returns:
        Logits `(batch, s, vocabulary_size)` (no Keras mask attached).

    Example:
    >>> import numpy as np
    >>> from kmodels.seq2seq import Autoencoder, Translator
    >>> model = Autoencoder(20, units=8)
    >>> tuple(model(np.array([[4, 5, 0]])).shape)
    (1, 3, 20)
    >>> translator = Translator(None, 30, None, encoder=model.encoder)
    """

    def __init__(self, encoder_or_vocabulary_size, units=None, **kwargs):
        super().__init__(**kwargs)
        value = encoder_or_vocabulary_size
        if isinstance(value, dict):
            value = keras.saving.deserialize_keras_object(value)
        if isinstance(value, Encoder):
            if units is not None and int(units) != value.units:
                raise ValueError(
                    f"units={units} does not match the encoder's {value.units}"
                )
            self.encoder = value
        else:
            if units is None:
                raise ValueError(
                    "Autoencoder(vocabulary_size, units) needs units when "
                    "no Encoder is given"
                )
            self.encoder = Encoder(int(value), int(units), name="encoder")
        self.vocabulary_size = self.encoder.vocabulary_size
        self.units = self.encoder.units
        self.output_layer = keras.layers.Dense(
            self.vocabulary_size, name="output_layer"
        )

    def build(self, tokens_shape):
        tokens_shape = tuple(tokens_shape)
        if not self.encoder.built:
            self.encoder.build(tokens_shape)
        self.output_layer.build(tokens_shape + (self.units,))
        # `trainable=False` from a config reaches only this layer's flag;
        # the setter passes it on to the sublayers. (Set True first: on
        # TensorFlow, assigning an attribute its current value is a no-op.)
        if not self.trainable:
            self.trainable = True
            self.trainable = False
        self.built = True

    def call(self, tokens, training=None):
        context = without_mask(self.encoder(tokens, training=training))
        return without_mask(self.output_layer(context))

    def compute_output_shape(self, tokens_shape):
        return tuple(tokens_shape) + (self.vocabulary_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder_or_vocabulary_size": (
                    keras.saving.serialize_keras_object(self.encoder)
                ),
                "units": self.units,
            }
        )
        return config
