"""The `Translator` as a keras-hub `Backbone` (the task's architecture)."""

import keras
import keras_hub

from kmodels.seq2seq.translator import Translator

ENCODER_IDS, DECODER_IDS = "encoder_token_ids", "decoder_token_ids"


@keras.saving.register_keras_serializable(package="kmodels")
class TranslatorBackbone(keras_hub.models.Backbone):
    """kmodels' `Translator` (bidirectional-GRU encoder, cross-attention,
    GRU decoder) as a keras-hub `Backbone`.

    A functional model over one `Translator` layer, named `"translator"`:
    its inputs are keras-hub's dict of `"encoder_token_ids"` (the source
    ids, `(batch, s)`) and `"decoder_token_ids"` (the shifted target ids,
    `(batch, t)`), both int and right-padded with 0 (the padding masks are
    the non-zero ids, as everywhere in kmodels); its output is the
    decoder's logits `(batch, t, target_vocabulary_size)`. Unlike most
    keras-hub backbones it ends with the output projection: the
    translator's decoder owns it.

    `TranslatorSeq2SeqLM` wraps it with a `TranslatorSeq2SeqLMPreprocessor`;
    `save_to_preset` / `from_preset` write and read its config and weights
    (import this class first: keras-hub finds it in Keras' registry).

    Args:
        context_vocabulary_size: int >= 1, the source ids.
        target_vocabulary_size: int >= 3, the target ids (logits width).
        units: int >= 1, the size of every layer.
        start_id: int, the `[START]` id. Defaults to `2`.
        end_id: int, the `[END]` id. Defaults to `3`.
        dtype: optional dtype policy of every layer (`"mixed_float16"`...).
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Example:
    >>> from kmodels.seq2seq import TranslatorBackbone
    >>> backbone = TranslatorBackbone(20, 30, units=8)
    >>> logits = backbone({
    ...     "encoder_token_ids": np.array([[5, 6, 7, 0]]),
    ...     "decoder_token_ids": np.array([[2, 9, 10]]),
    ... })
    >>> tuple(logits.shape)
    (1, 3, 30)
    >>> backbone.translator.generate(np.array([[5, 6, 7, 0]]), 4)[0].shape
    (1, 4)

    See docs/seq2seq.md, section "The keras-hub task".
    """

    def __init__(
        self,
        context_vocabulary_size,
        target_vocabulary_size,
        units,
        start_id=2,
        end_id=3,
        dtype=None,
        **kwargs,
    ):
        # === Layers === (the Translator checks every argument)
        translator = Translator(
            context_vocabulary_size,
            target_vocabulary_size,
            units,
            start_id=start_id,
            end_id=end_id,
            dtype=dtype,
            name="translator",
        )
        # === Functional model ===
        encoder_ids = keras.Input((None,), dtype="int32", name=ENCODER_IDS)
        decoder_ids = keras.Input((None,), dtype="int32", name=DECODER_IDS)
        logits = translator((encoder_ids, decoder_ids))
        super().__init__(
            inputs={ENCODER_IDS: encoder_ids, DECODER_IDS: decoder_ids},
            outputs=logits,
            dtype=dtype,
            **kwargs,
        )
        # === Config ===
        self.translator = translator
        self.context_vocabulary_size = translator.context_vocabulary_size
        self.target_vocabulary_size = translator.target_vocabulary_size
        self.units = translator.units
        self.start_id = translator.start_id
        self.end_id = translator.end_id

    @property
    def encoder(self):
        """The translator's `Encoder` (freeze it with `trainable = False`
        before `compile`)."""
        return self.translator.encoder

    @property
    def decoder(self):
        """The translator's `Decoder`."""
        return self.translator.decoder

    @classmethod
    def from_translator(cls, translator, **kwargs):
        """A backbone holding a copy of `translator`'s weights (a built
        `kmodels.seq2seq.Translator`): the same sizes and ids, the same
        outputs."""
        if not isinstance(translator, Translator):
            raise ValueError(
                "TranslatorBackbone.from_translator expects a "
                f"kmodels.seq2seq.Translator; got {type(translator).__name__}."
            )
        if not translator.built:
            raise ValueError(
                "TranslatorBackbone.from_translator: the translator has no "
                "weights yet; call it, `fit` it or load it first."
            )
        backbone = cls(
            translator.context_vocabulary_size,
            translator.target_vocabulary_size,
            translator.units,
            start_id=translator.start_id,
            end_id=translator.end_id,
            dtype=translator.dtype_policy,
            **kwargs,
        )
        backbone.translator.set_weights(translator.get_weights())
        return backbone

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "context_vocabulary_size": self.context_vocabulary_size,
                "target_vocabulary_size": self.target_vocabulary_size,
                "units": self.units,
                "start_id": self.start_id,
                "end_id": self.end_id,
            }
        )
        return config
