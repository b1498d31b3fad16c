"""Encoder pretraining: reconstruct the input ids from the context."""

import keras

from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.contracts.checks import check_autoencoder_batch
from kmodels.contracts.checks import check_ids
from kmodels.contracts.hook import ContractModel
from kmodels.layers.sublayers import finish_build
from kmodels.saving.saving_model import SavingModel
from kmodels.seq2seq.eager_cache import CheckedEagerCall
from kmodels.seq2seq.encoder import Encoder
from kmodels.seq2seq.free_cores import FreeCoreThreads
from kmodels.seq2seq.masking import without_mask
from kmodels.seq2seq.xla_by_default import XLAByDefault


@keras.saving.register_keras_serializable(package="kmodels")
class Autoencoder(
    CheckedEagerCall,
    FreeCoreThreads,
    ContractModel,
    SavingModel,
    XLAByDefault,
    keras.Model,
):
    """An `Encoder` plus `Dense(vocabulary_size)`: logits for the input ids.

    Trained with `masked_loss(tokens, model(tokens))`, it pretrains the
    encoder on unlabelled text. Afterwards, hand `autoencoder.encoder` to
    `Translator(..., encoder=...)`, optionally frozen
    (`encoder.trainable = False`, then compile).

    `compile`'s default `jit_compile="auto"` compiles with XLA on
    TensorFlow on the CPU too, as for `Translator`.

    Args:
        encoder_or_vocabulary_size: an `Encoder` (or its config) to train,
            or the vocabulary size (int >= 1) of a new one.
        units: int >= 1. Needed with a vocabulary size; with an encoder it
            may be omitted (it must match if given). Both are checked at
            construction, before any layer is made (`ValueError` naming the
            argument).
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
        # Every argument is checked before anything is built.
        owner = "Autoencoder"
        units = check_optional_int(units, "units", owner)
        value = encoder_or_vocabulary_size
        if isinstance(value, dict):
            # Left unbuilt: this model's `build` builds it under its name
            # scope, so the weights keep their paths through a `.keras`
            # round trip.
            value = keras.saving.deserialize_keras_object(
                {k: v for k, v in value.items() if k != "build_config"}
            )
        if isinstance(value, Encoder):
            if units is not None and units != value.units:
                raise ValueError(
                    f"{owner}: units={units} does not match the encoder's "
                    f"{value.units}."
                )
            encoder = value
        else:
            vocabulary_size = check_int(
                value, "encoder_or_vocabulary_size", owner
            )
            if units is None:
                raise ValueError(
                    f"{owner}: a vocabulary size needs `units` (an integer "
                    ">= 1); got None."
                )
            encoder = None
        super().__init__(**kwargs)
        if encoder is None:
            # Sublayers take the model's dtype policy.
            encoder = Encoder(
                vocabulary_size, units, dtype=self.dtype_policy, name="encoder"
            )
        self.encoder = encoder
        self.vocabulary_size = self.encoder.vocabulary_size
        self.units = self.encoder.units
        self.output_layer = keras.layers.Dense(
            self.vocabulary_size, dtype=self.dtype_policy, name="output_layer"
        )

    def build(self, tokens_shape):
        tokens_shape = tuple(tokens_shape)
        if not self.encoder.built:
            self.encoder.build(tokens_shape)
        self.output_layer.build(tokens_shape + (self.units,))
        finish_build(self)

    def _check_call_arguments(self, arguments, training):
        tokens = arguments.get("tokens")
        if tokens is not None:
            check_ids(tokens, "tokens", "Autoencoder", self.vocabulary_size)

    def call(self, tokens, training=None):
        context = without_mask(self.encoder(tokens, training=training))
        return without_mask(self.output_layer(context))

    def compute_output_shape(self, tokens_shape):
        return tuple(tokens_shape) + (self.vocabulary_size,)

    def _batch_spec(self):
        # `tokens, tokens`: what `fit` and `evaluate` build the loss and
        # metrics from (`ContractModel`).
        ids = keras.KerasTensor((None, None), "int32")
        return ids, ids

    def check_batch(self, x, y=None, training=False):
        """Checks a batch (or all the data) of `fit` / `evaluate` /
        `predict` / `*_on_batch`, before any compiled step: `x` ids in
        `[0, vocabulary_size)`, 2-D and non-empty; `y` (optional) the same
        ids' shape and range. Raises the `TypeError` / `ValueError` of
        `kmodels.contracts`."""
        check_autoencoder_batch(self, x, y)

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
