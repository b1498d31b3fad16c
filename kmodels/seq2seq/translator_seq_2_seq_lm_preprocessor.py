"""Two kmodels `TextProcessor`s as a keras-hub `Seq2SeqLMPreprocessor`."""

import sys

import keras
import keras_hub
import numpy as np

from kmodels.arguments import ArgumentTypeError
from kmodels.arguments import check_int
from kmodels.arguments import check_str
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.translator_backbone import DECODER_IDS
from kmodels.seq2seq.translator_backbone import ENCODER_IDS
from kmodels.seq2seq.translator_backbone import TranslatorBackbone

ENCODER_TEXT, DECODER_TEXT = "encoder_text", "decoder_text"


def _processor(value, who):
    if isinstance(value, dict):
        value = TextProcessor.from_config(value)
    if not isinstance(value, TextProcessor):
        raise ValueError(
            f"TranslatorSeq2SeqLMPreprocessor: `{who}` must be a "
            "kmodels.seq2seq.TextProcessor (or its config); got "
            f"{type(value).__name__}."
        )
    return value


def _texts(value, who):
    """`value` as a list of str (a str, bytes, a list, a NumPy or eager
    TensorFlow string array), and whether it was one str."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if isinstance(value, (str, bytes)):
        return [_text(value, who, 0)], True
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if not isinstance(value, (list, tuple)):
        raise ArgumentTypeError(
            f"TranslatorSeq2SeqLMPreprocessor expects `{who}` as a str or a "
            f"sequence of str; got {type(value).__name__}."
        )
    return [_text(t, who, i) for i, t in enumerate(value)], False


def _resized(processor, length, extra, who):
    """`processor` with `max_length = length + extra` (`extra`: the target
    row's `[END]` beyond the decoder's ids), the same vocabulary."""
    length = check_int(
        length, who, "TranslatorSeq2SeqLMPreprocessor", 3 - extra
    )
    if length + extra == processor.max_length:
        return processor
    return TextProcessor.from_config(
        dict(processor.get_config(), max_length=length + extra)
    )


def _in_graph(value):
    """True for a symbolic TensorFlow tensor (a `tf.data` map, a
    `tf.function`): no values to read in Python."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and tf.is_tensor(value) and not tf.executing_eagerly()


def _text(value, who, i):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"TranslatorSeq2SeqLMPreprocessor: `{who}`[{i}] must be a str; "
            f"got {value!r} ({type(value).__name__})."
        )
    return value


@keras.saving.register_keras_serializable(package="kmodels")
class TranslatorSeq2SeqLMPreprocessor(keras_hub.models.Seq2SeqLMPreprocessor):
    """Strings to the ids a `TranslatorBackbone` reads, and back.

    keras-hub's `Seq2SeqLMPreprocessor` with kmodels' text pipeline: the
    source and the target side each have their own `TextProcessor`
    (word-level or WordPiece, with its own vocabulary), so there is no
    single `tokenizer` (it is `None`). Everything runs in Python on NumPy
    arrays, the same on every backend; the SavedModel of
    `TranslatorSeq2SeqLM.export` re-expresses it in TensorFlow ops.

    Calling it on `{"encoder_text": sources, "decoder_text": targets}` (or
    on `(sources, targets)` as `x` and `y`) returns keras-hub's `(x, y,
    sample_weight)`: `x = {"encoder_token_ids": (batch, s), "decoder_token_ids":
    (batch, t - 1)}`, `y` the target ids shifted by one and `sample_weight`
    1.0 where `y` is a token, 0.0 on padding, with `s` and `t` the
    processors' `max_length`.

    Args:
        context_processor: the adapted `TextProcessor` of the source side
            (or its config).
        target_processor: the adapted `TextProcessor` of the target side
            (or its config).
        separator: str joining the output tokens in `generate_postprocess`
            (`" "` for words, `""` for the date task).
        **kwargs: other `keras.layers.Layer` arguments (`name`).

    Example:
    >>> from kmodels.seq2seq import TextProcessor
    >>> from kmodels.seq2seq import TranslatorSeq2SeqLMPreprocessor
    >>> src, tgt = TextProcessor(6), TextProcessor(6)
    >>> src.adapt(["hola casa"]); tgt.adapt(["hello house"])
    >>> pre = TranslatorSeq2SeqLMPreprocessor(src, tgt)
    >>> x, y, w = pre({"encoder_text": ["hola"], "decoder_text": ["hello"]})
    >>> x["encoder_token_ids"].tolist(), y.tolist(), w.tolist()
    ([[2, 5, 3, 0, 0, 0]], [[5, 3, 0, 0, 0]], [[1.0, 1.0, 0.0, 0.0, 0.0]])
    """

    backbone_cls = TranslatorBackbone
    tokenizer_cls = None

    def __init__(
        self,
        context_processor,
        target_processor,
        separator=" ",
        encoder_sequence_length=None,
        decoder_sequence_length=None,
        **kwargs,
    ):
        context_processor = _processor(context_processor, "context_processor")
        target_processor = _processor(target_processor, "target_processor")
        check_str(separator, "separator", "TranslatorSeq2SeqLMPreprocessor")
        super().__init__(tokenizer=None, **kwargs)
        self.context_processor = context_processor
        self.target_processor = target_processor
        self.separator = separator
        # keras-hub's length arguments (`from_preset(...,
        # decoder_sequence_length=...)`) resize the processors.
        if encoder_sequence_length is not None:
            self.encoder_sequence_length = encoder_sequence_length
        if decoder_sequence_length is not None:
            self.decoder_sequence_length = decoder_sequence_length

    # keras-hub's lengths are the processors' own: setting one makes the
    # processor pad and truncate to it (same vocabulary), never a length
    # reported but not applied.
    @property
    def encoder_sequence_length(self):
        """Ids per source row (the context processor's `max_length`)."""
        processor = getattr(self, "context_processor", None)
        return None if processor is None else processor.max_length

    @encoder_sequence_length.setter
    def encoder_sequence_length(self, value):
        processor = getattr(self, "context_processor", None)
        if processor is None:
            return  # keras-hub's `__init__`, before the processors
        self.context_processor = _resized(
            processor, value, 0, "encoder_sequence_length"
        )

    @property
    def decoder_sequence_length(self):
        """Decoder ids per target row in training (`[START]` and the
        words; the target processor's `max_length - 1`)."""
        processor = getattr(self, "target_processor", None)
        return None if processor is None else processor.max_length - 1

    @decoder_sequence_length.setter
    def decoder_sequence_length(self, value):
        processor = getattr(self, "target_processor", None)
        if processor is None:
            return
        self.target_processor = _resized(
            processor, value, 1, "decoder_sequence_length"
        )

    def build(self, input_shape):
        # No packers: each TextProcessor pads to its own `max_length`.
        self.built = True

    def call(self, x, y=None, sample_weight=None, **kwargs):
        if isinstance(x, dict):
            if y is not None:
                raise ValueError(
                    "TranslatorSeq2SeqLMPreprocessor: with a dict `x` the "
                    "targets are its 'decoder_text'; got a `y` too."
                )
            missing = {ENCODER_TEXT, DECODER_TEXT} - set(x)
            if missing:
                raise ValueError(
                    "TranslatorSeq2SeqLMPreprocessor expects a dict with "
                    f"'{ENCODER_TEXT}' and '{DECODER_TEXT}'; "
                    f"{sorted(missing)} missing in {sorted(x)}."
                )
            sources, targets = x[ENCODER_TEXT], x[DECODER_TEXT]
        elif y is not None:
            sources, targets = x, y
        else:
            raise ValueError(
                "TranslatorSeq2SeqLMPreprocessor expects "
                f"{{'{ENCODER_TEXT}': sources, '{DECODER_TEXT}': targets}} "
                "or sources as `x` and targets as `y`; got no targets."
            )
        if _in_graph(sources) or _in_graph(targets):
            return self._call_in_graph(sources, targets, sample_weight)
        sources, _ = _texts(sources, ENCODER_TEXT)
        targets, _ = _texts(targets, DECODER_TEXT)
        if len(sources) != len(targets):
            raise ValueError(
                "TranslatorSeq2SeqLMPreprocessor: sources and targets must "
                f"pair up; got {len(sources)} sources and {len(targets)} "
                "targets."
            )
        # A target's slots are numbered by its source's placeholders.
        target = self.target_processor(
            targets,
            self.context_processor.placeholders_in(sources)
            if self.target_processor.mask_placeholders
            else None,
        )
        y = target[:, 1:]
        x = {
            ENCODER_IDS: self.context_processor(sources),
            DECODER_IDS: target[:, :-1],
        }
        weight = (y != self.target_processor.pad_id).astype("float32")
        if sample_weight is not None:
            weight = weight * np.asarray(sample_weight, "float32").reshape(
                (-1, 1)
            )
        return keras.utils.pack_x_y_sample_weight(x, y, weight)

    def _call_in_graph(self, sources, targets, sample_weight):
        """`call` on the string tensors of a `tf.data` pipeline (keras-hub's
        `fit` maps its preprocessor over the dataset): the Python text
        pipeline runs through `tf.numpy_function`, so the ids are those
        of the eager call, on every backend."""
        # The data pipeline only (like `keras.layers.TextVectorization`):
        # never in a compiled model step.
        import tensorflow as tf

        def run(source_texts, target_texts):
            x, y, weight = self.call(source_texts, target_texts)
            return x[ENCODER_IDS], x[DECODER_IDS], y, weight

        encoder, decoder, y, weight = tf.numpy_function(
            run,
            [sources, targets],
            [tf.int32, tf.int32, tf.int32, tf.float32],
            stateful=False,
        )
        encoder.set_shape([None, self.encoder_sequence_length])
        for tensor in (decoder, y, weight):
            tensor.set_shape([None, self.decoder_sequence_length])
        if sample_weight is not None:
            weight = weight * tf.reshape(
                tf.cast(sample_weight, tf.float32), [-1, 1]
            )
        x = {ENCODER_IDS: encoder, DECODER_IDS: decoder}
        return keras.utils.pack_x_y_sample_weight(x, y, weight)

    def generate_preprocess(self, x, **kwargs):
        """The source ids of `x` (a str, a list of str, or a dict with
        `"encoder_text"`, whose `"decoder_text"` prompts must be empty):
        `{"encoder_token_ids": (batch, s) int32}`."""
        if isinstance(x, dict):
            prompts = x.get(DECODER_TEXT)
            if prompts is not None:
                prompts, _ = _texts(prompts, DECODER_TEXT)
                if any(p for p in prompts):
                    raise ValueError(
                        "TranslatorSeq2SeqLM.generate does not take decoder "
                        f"prompts ('{DECODER_TEXT}'); got {prompts[:3]!r}. "
                        "Force the first target ids with "
                        "`prefix=` (ids) instead."
                    )
            if ENCODER_TEXT not in x:
                raise ValueError(
                    "TranslatorSeq2SeqLMPreprocessor.generate_preprocess "
                    f"expects '{ENCODER_TEXT}' in a dict; got {sorted(x)}."
                )
            x = x[ENCODER_TEXT]
        texts, _ = _texts(x, ENCODER_TEXT)
        return {ENCODER_IDS: self.context_processor(texts)}

    def generate_postprocess(self, x):
        """Strings from generated target ids (`(batch, length)`, or a dict
        with `"decoder_token_ids"`), as `TextProcessor.decode` writes them
        with this preprocessor's `separator`."""
        if isinstance(x, dict):
            x = x[DECODER_IDS]
        return self.target_processor.decode(
            keras.ops.convert_to_numpy(x), separator=self.separator
        )

    def get_config(self):
        config = super().get_config()
        for key in (
            "tokenizer",
            "encoder_sequence_length",
            "decoder_sequence_length",
        ):
            config.pop(key, None)
        config.update(
            {
                "context_processor": self.context_processor.get_config(),
                "target_processor": self.target_processor.get_config(),
                "separator": self.separator,
            }
        )
        return config
