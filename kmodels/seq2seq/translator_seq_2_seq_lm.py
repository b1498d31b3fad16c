"""The translator as a keras-hub `Seq2SeqLM` task."""

import keras
import keras_hub
import numpy as np

from kmodels.arguments import check_bool
from kmodels.contracts.checks import check_translator_inputs
from kmodels.contracts.hook import ContractModel
from kmodels.saving.saving_model import SavingModel
from kmodels.seq2seq import sampling
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.text_translator import translate
from kmodels.seq2seq.translator_backbone import DECODER_IDS
from kmodels.seq2seq.translator_backbone import ENCODER_IDS
from kmodels.seq2seq.translator_backbone import TranslatorBackbone
from kmodels.seq2seq.translator_seq_2_seq_lm_preprocessor import (
    TranslatorSeq2SeqLMPreprocessor,
)
from kmodels.seq2seq.translator_seq_2_seq_lm_preprocessor import _texts

_OWNER = "TranslatorSeq2SeqLM.generate"


def _has_text(x):
    if isinstance(x, dict):
        return any(_has_text(v) for v in x.values())
    if isinstance(x, (tuple, list)):
        return any(_has_text(v) for v in x)
    if isinstance(x, (str, bytes)):
        return True
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "USO"
    # A string tensor of a tf.data pipeline (`tf.string`).
    return getattr(getattr(x, "dtype", None), "name", None) == "string"


class _ArrayData:
    """Arrays go to Keras' own data adapter (which shuffles them each
    epoch); keras-hub's pipeline turns them into a tf.data dataset, where
    `shuffle` is ignored when grain is not installed. Datasets and
    generators still go through keras-hub's `fit`."""

    def fit(self, x=None, y=None, *args, **kwargs):
        if _are_arrays(x):
            return keras.Model.fit(self, x, y, *args, **kwargs)
        return super().fit(x, y, *args, **kwargs)


def _are_arrays(x):
    leaves = keras.tree.flatten(x)
    return bool(leaves) and all(
        isinstance(leaf, np.ndarray) or keras.ops.is_tensor(leaf)
        for leaf in leaves
    )


@keras.saving.register_keras_serializable(package="kmodels")
class TranslatorSeq2SeqLM(
    ContractModel, SavingModel, _ArrayData, keras_hub.models.Seq2SeqLM
):
    """kmodels' translator as a keras-hub `Seq2SeqLM`: strings in, strings
    out, `compile(sampler=...)`, presets.

    A `TranslatorBackbone` (the `Translator`) with a
    `TranslatorSeq2SeqLMPreprocessor` (its two `TextProcessor`s). `fit`,
    `evaluate` and `predict` take `{"encoder_text": ..., "decoder_text":
    ...}` or sources as `x` and targets as `y` (Python or NumPy strings),
    as keras-hub's `BartSeq2SeqLM` does; `generate` takes strings (or
    preprocessed `{"encoder_token_ids": ...}`) and returns strings.
    Generation is `Translator.generate`'s, with every kmodels option
    (`length_penalty`, `min_length`, `no_repeat_ngram_size`, `banned_ids`,
    `repetition_penalty`, `prefix`, `num_return_sequences`): the task
    returns exactly what `TextTranslator.translate` returns for the same
    weights, sampler and options (`max_length` aside, below).

    Lengths count as keras-hub and Hugging Face count them, the decoder's
    `[START]` included: `generate(x, max_length=n)` generates at most
    `n - 1` ids (`[END]` included), `translate(x, max_length=n - 1)`;
    `min_length` is the same number in both (Hugging Face's `min_length`,
    kmodels' "the end id is the `min_length`-th generated id at the
    earliest"). See docs/decoding.md, "Option names".

    `save_to_preset(folder)` writes keras-hub's preset files and
    `keras_hub.models.Seq2SeqLM.from_preset(folder)` (or this class's)
    reads them back on any backend, once this class is imported (keras-hub
    finds it in Keras' registry; a `.keras` file of the task loads after
    `import kmodels` alone). `export(path)` writes the
    TensorFlow-only SavedModel of `TextTranslator.export`, n-best and
    attention included.

    Args:
        backbone: a `TranslatorBackbone`.
        preprocessor: a `TranslatorSeq2SeqLMPreprocessor` or `None` (then
            `fit` takes ids and `generate` returns ids).
        **kwargs: other `keras_hub.models.Seq2SeqLM` arguments.

    Example:
    >>> from kmodels.seq2seq import TextProcessor, TranslatorBackbone
    >>> from kmodels.seq2seq import TranslatorSeq2SeqLM
    >>> from kmodels.seq2seq import TranslatorSeq2SeqLMPreprocessor
    >>> pairs = {"encoder_text": ["hola", "casa"],
    ...          "decoder_text": ["hello", "house"]}
    >>> src, tgt = TextProcessor(6), TextProcessor(6)
    >>> src.adapt(pairs["encoder_text"]); tgt.adapt(pairs["decoder_text"])
    >>> lm = TranslatorSeq2SeqLM(
    ...     TranslatorBackbone(src.vocabulary_size, tgt.vocabulary_size, 8),
    ...     TranslatorSeq2SeqLMPreprocessor(src, tgt))
    >>> history = lm.fit(pairs, epochs=2, verbose=0)
    >>> lm.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=2))
    >>> isinstance(lm.generate("hola", max_length=4), str)
    True
    >>> lm.save_to_preset("translator_preset")
    >>> lm = keras_hub.models.Seq2SeqLM.from_preset("translator_preset")
    """

    backbone_cls = TranslatorBackbone
    preprocessor_cls = TranslatorSeq2SeqLMPreprocessor

    def __init__(self, backbone, preprocessor=None, **kwargs):
        if not isinstance(backbone, TranslatorBackbone):
            raise ValueError(
                "TranslatorSeq2SeqLM: `backbone` must be a "
                f"TranslatorBackbone; got {type(backbone).__name__}."
            )
        if preprocessor is not None:
            if not isinstance(preprocessor, TranslatorSeq2SeqLMPreprocessor):
                raise ValueError(
                    "TranslatorSeq2SeqLM: `preprocessor` must be a "
                    "TranslatorSeq2SeqLMPreprocessor or None; got "
                    f"{type(preprocessor).__name__}."
                )
            # The same checks as `TextTranslator` (sizes, start and end ids).
            TextTranslator(
                backbone.translator,
                preprocessor.context_processor,
                preprocessor.target_processor,
            )
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        # === Functional model ===
        inputs = backbone.input
        super().__init__(inputs=inputs, outputs=backbone(inputs), **kwargs)

    @classmethod
    def from_text_translator(cls, bundle, **kwargs):
        """The task of a `TextTranslator` bundle: its translator's weights
        (copied) and its processors and separator."""
        if not isinstance(bundle, TextTranslator):
            raise ValueError(
                "TranslatorSeq2SeqLM.from_text_translator expects a "
                f"TextTranslator; got {type(bundle).__name__}."
            )
        return cls(
            TranslatorBackbone.from_translator(bundle.translator),
            TranslatorSeq2SeqLMPreprocessor(
                bundle.context_processor,
                bundle.target_processor,
                separator=bundle.separator,
            ),
            **kwargs,
        )

    def text_translator(self):
        """This task as a `TextTranslator` (the same translator, not a
        copy, and the preprocessor's processors)."""
        if self.preprocessor is None:
            raise ValueError(
                "TranslatorSeq2SeqLM.text_translator needs a preprocessor; "
                "this task has none."
            )
        return TextTranslator(
            self.backbone.translator,
            self.preprocessor.context_processor,
            self.preprocessor.target_processor,
            separator=self.preprocessor.separator,
        )

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        weighted_metrics="auto",
        sampler="greedy",
        **kwargs,
    ):
        """keras-hub's `Seq2SeqLM.compile`, for a model trained from
        scratch: `optimizer="auto"` is `Adam(1e-3)` (keras-hub's fine-tuning
        default, 2e-5, barely moves a fresh translator), `loss="auto"` and
        `weighted_metrics="auto"` keras-hub's (sparse cross-entropy on
        logits, accuracy, both weighted by the preprocessor's padding
        mask), and `sampler` a name (`"greedy"`, the default here as in
        `TextTranslator.translate`; `"beam"`, `"top_k"`...) or a
        `keras_hub.samplers` instance, for `generate`."""
        if isinstance(optimizer, str) and optimizer == "auto":
            optimizer = keras.optimizers.Adam(1e-3)
        super().compile(
            optimizer=optimizer,
            loss=loss,
            weighted_metrics=weighted_metrics,
            sampler=sampler,
            **kwargs,
        )

    def preprocess_samples(self, x, y=None, sample_weight=None):
        # `fit` / `evaluate` / `predict` preprocess strings here, eagerly;
        # the tf.data pipeline Keras builds then carries ids only.
        if self.preprocessor is None or not _has_text((x, y)):
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        return self.preprocessor(x, y=y, sample_weight=sample_weight)

    def _ids(self, x, y, sample_weight):
        if self.preprocessor is not None and _has_text((x, y)):
            return keras.utils.unpack_x_y_sample_weight(
                self.preprocess_samples(x, y, sample_weight)
            )
        return x, y, sample_weight

    def fit(self, x=None, y=None, sample_weight=None, **kwargs):
        validation = kwargs.get("validation_data")
        if isinstance(validation, (tuple, list)) and _has_text(validation):
            kwargs["validation_data"] = self._ids(
                *keras.utils.unpack_x_y_sample_weight(tuple(validation))
            )
        x, y, sample_weight = self._ids(x, y, sample_weight)
        return super().fit(x, y, sample_weight=sample_weight, **kwargs)

    def check_batch(self, x, y=None, training=False):
        """Checks a batch of ids (what the preprocessor writes) before any
        compiled step: `x` a dict of `"encoder_token_ids"` in
        `[0, context_vocabulary_size)` and `"decoder_token_ids"` in
        `[0, target_vocabulary_size)`, 2-D, the same batch size; `y`
        (optional) target ids of the decoder ids' shape. Raises the
        `TypeError` / `ValueError` of `kmodels.contracts`."""
        if not isinstance(x, dict) or {ENCODER_IDS, DECODER_IDS} - set(x):
            raise ValueError(
                "TranslatorSeq2SeqLM expects ids as a dict with "
                f"'{ENCODER_IDS}' and '{DECODER_IDS}' (or strings, with a "
                f"preprocessor); got {_describe(x)}."
            )
        check_translator_inputs(
            self.backbone.translator, (x[ENCODER_IDS], x[DECODER_IDS]), y
        )

    def evaluate(self, x=None, y=None, sample_weight=None, **kwargs):
        x, y, sample_weight = self._ids(x, y, sample_weight)
        return super().evaluate(x, y, sample_weight=sample_weight, **kwargs)

    def predict(self, x, **kwargs):
        x, _, _ = self._ids(x, None, None)
        return super().predict(x, **kwargs)

    def generate(
        self,
        inputs,
        max_length=None,
        stop_token_ids="auto",
        strip_prompt=False,
        **options,
    ):
        """Translations of `inputs`, with the compiled sampler.

        Args:
            inputs: a str, a list of str, a dict with `"encoder_text"`
                (its `"decoder_text"` prompts, if any, must be `""`), or
                preprocessed `{"encoder_token_ids": (batch, s)}` ids.
            max_length: int >= 2, the decoder's length with its `[START]`:
                at most `max_length - 1` ids are generated, `[END]`
                included. Defaults to the target processor's `max_length`.
            stop_token_ids: `"auto"` (the `[END]` id) or a sequence of ids
                holding the `[END]` id (the translator always stops
                there); other ids in it end a sequence too, for greedy and
                random samplers (a beam search refuses them: stopping
                changes which beams finish).
            strip_prompt: bool; there is no prompt to strip (decoder
                prompts are refused), so either value returns the same.
            **options: `Translator.generate`'s options: the constraints
                (`length_penalty`, `min_length`, `no_repeat_ngram_size`,
                `banned_ids`, `repetition_penalty`, `prefix`), `seed`,
                `temperature`, `num_return_sequences`,
                `return_all_beams`, `return_scores`, `return_attention`,
                and `sampler` to override the compiled one for this call.

        Returns:
            A str for a str, else a list of str (with several sequences
            per input, a list per input), as `TextTranslator.translate`;
            with `return_attention` / `return_scores`, a tuple as
            `translate`'s; the same for preprocessed inputs. Without a
            preprocessor, `{"decoder_token_ids": (batch, max_length - 1)
            int32}`, with `"attention"` and `"scores"` as requested.

        Raises:
            TypeError / ValueError: as `TextTranslator.translate`, and
                `max_length < 2`, `stop_token_ids` without the `[END]` id
                or with extra ids under beam search, decoder prompts.
        """
        translator = self.backbone.translator
        check_bool(strip_prompt, "strip_prompt", _OWNER, type_error=True)
        if max_length is None:
            if self.preprocessor is None:
                raise ValueError(
                    f"{_OWNER}: `max_length` is required without a "
                    "preprocessor (it defaults to the target processor's "
                    "max_length)."
                )
            max_length = self.preprocessor.target_processor.max_length
        max_length = sampling.check_max_length(max_length, _OWNER)
        if max_length < 2:
            raise ValueError(
                f"{_OWNER}: `max_length` counts the decoder's [START] too, so "
                f"it must be >= 2 (one generated id); got {max_length}."
            )
        options.setdefault("sampler", getattr(self, "sampler", None))
        sampler = options["sampler"]
        if (
            _is_beam(sampler)
            and not isinstance(sampler, str)
            and (options.get("num_return_sequences") or 1) > 1
            and not getattr(sampler, "return_all_beams", False)
        ):
            # The n best of the compiled beam search: the same search by
            # name (an instance returns its best beam only).
            options["sampler"] = "beam"
            options.setdefault("num_beams", sampler.num_beams)
        stops = self._extra_stops(stop_token_ids, options)
        preprocessed = isinstance(inputs, dict) and ENCODER_IDS in inputs
        if self.preprocessor is None or preprocessed:
            ids = inputs[ENCODER_IDS] if preprocessed else inputs
            return self._generate_ids(ids, max_length, stops, options)
        if hasattr(inputs, "as_numpy_iterator"):
            # A tf.data dataset of batches, as keras-hub's `generate` takes
            # it: translated as one list.
            inputs = _dataset_texts(inputs)
        texts = inputs
        if isinstance(inputs, dict):
            # Refuses decoder prompts; keeps a single str a single str.
            self.preprocessor.generate_preprocess(inputs)
            texts = inputs["encoder_text"]
        if stops:
            return self._translate_with_stops(texts, max_length, stops, options)
        return translate(
            texts,
            translator,
            self.preprocessor.context_processor,
            self.preprocessor.target_processor,
            max_length=max_length - 1,
            separator=self.preprocessor.separator,
            **options,
        )

    def _extra_stops(self, stop_token_ids, options):
        """The stop ids besides `[END]` (a sorted tuple, maybe empty)."""
        end_id = self.backbone.end_id
        if isinstance(stop_token_ids, str) and stop_token_ids == "auto":
            return ()
        if stop_token_ids is None or isinstance(stop_token_ids, (str, bytes)):
            raise ValueError(
                f'{_OWNER}: `stop_token_ids` must be "auto" or a sequence '
                f"of ids holding the [END] id ({end_id}); got "
                f"{stop_token_ids!r}. The translator always stops at [END]."
            )
        ids = np.asarray(stop_token_ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"{_OWNER}: `stop_token_ids` must be ints; got "
                f"{stop_token_ids!r}."
            )
        ids = sorted(set(ids.tolist()))
        if end_id not in ids:
            raise ValueError(
                f"{_OWNER}: `stop_token_ids` must hold the [END] id "
                f"({end_id}): the translator always stops there; got "
                f"{stop_token_ids!r}."
            )
        size = self.backbone.target_vocabulary_size
        if ids[0] < 1 or ids[-1] >= size:
            raise ValueError(
                f"{_OWNER}: `stop_token_ids` must lie in [1, {size}); got "
                f"{stop_token_ids!r}."
            )
        extra = tuple(i for i in ids if i != end_id)
        if extra and _is_beam(options.get("sampler")):
            raise ValueError(
                f"{_OWNER}: beam search takes only the [END] id as "
                f"`stop_token_ids`; got {stop_token_ids!r}."
            )
        asked = [
            key
            for key in (
                "return_attention",
                "return_scores",
                "num_return_sequences",
                "return_all_beams",
            )
            if options.get(key)
        ]
        if extra and asked:
            raise ValueError(
                f"{_OWNER}: `stop_token_ids` with ids besides [END] returns "
                f"one translation per input, without attention or scores; "
                f"got {', '.join(asked)}."
            )
        return extra

    def _generate_ids(self, ids, max_length, stops, options):
        """`generate` of source ids: strings with a preprocessor, else
        `{"decoder_token_ids", "attention", "scores"}` (the last two as
        requested)."""
        return_attention = check_bool(
            options.pop("return_attention", False),
            "return_attention",
            _OWNER,
            type_error=True,
        )
        return_scores = options.pop("return_scores", False)
        ids, attention, *scores = (
            keras.ops.convert_to_numpy(x)
            for x in self.backbone.translator.generate(
                ids,
                max_length=max_length - 1,
                return_scores=return_scores,
                **options,
            )
        )
        ids = self._stopped(ids, stops)
        if self.preprocessor is None:
            out = {DECODER_IDS: ids}
            if return_attention:
                out["attention"] = attention
            if return_scores:
                out["scores"] = scores[0]
            return out
        decode = self.preprocessor.generate_postprocess
        texts = [decode(row) for row in ids] if ids.ndim == 3 else decode(ids)
        extras = (attention,) * return_attention + tuple(scores)
        return (texts, *extras) if extras else texts

    def _stopped(self, ids, stops):
        """`ids` cut after the first id of `stops` in each row (the stop
        id kept, 0 after it, as after `[END]`)."""
        ids = np.array(keras.ops.convert_to_numpy(ids))
        if not stops:
            return ids
        hit = np.isin(ids, stops)
        after = np.cumsum(hit, axis=-1) - hit > 0
        ids[after] = 0
        return ids

    def _translate_with_stops(self, texts, max_length, stops, options):
        scalar = isinstance(texts, (str, bytes))
        pre = self.preprocessor
        ids, _ = self.backbone.translator.generate(
            pre.context_processor(texts), max_length=max_length - 1, **options
        )
        fill = None
        if pre.target_processor.mask_placeholders:
            fill = pre.context_processor.placeholders_in(
                [texts] if scalar else texts
            )
        out = pre.target_processor.decode(
            self._stopped(ids, stops),
            separator=pre.separator,
            # The source's placeholders fill the target's slots.
            placeholders=fill,
        )
        return out[0] if scalar else out

    def export(self, filepath, max_length=None, **kwargs):
        """`TextTranslator.export` of this task: the TensorFlow-only
        SavedModel (`translate`, `nbest` with scores and attention,
        `tokenize`, `detokenize`). `max_length` counts the decoder's
        `[START]`, as in `generate` (default: the target processor's
        `max_length`); the other arguments are `TextTranslator.export`'s
        (`sampler="beam"`, `num_beams`, `num_return_sequences`, the
        constraints)."""
        bundle = self.text_translator()
        if max_length is None:
            max_length = bundle.target_processor.max_length
        max_length = sampling.check_max_length(max_length, "export")
        if max_length < 2:
            raise ValueError(
                "TranslatorSeq2SeqLM.export: `max_length` counts the "
                f"decoder's [START] too, so it must be >= 2; got {max_length}."
            )
        return bundle.export(filepath, max_length=max_length - 1, **kwargs)


def _dataset_texts(dataset):
    texts = []
    for batch in dataset.as_numpy_iterator():
        if isinstance(batch, dict):
            batch = batch["encoder_text"]
        texts.extend(_texts(batch, "encoder_text")[0])
    return texts


def _describe(x):
    if isinstance(x, dict):
        return f"a dict with keys {sorted(x)}"
    return type(x).__name__


def _is_beam(sampler):
    if isinstance(sampler, str):
        return sampler == "beam"
    return type(sampler).__name__ == "BeamSampler"
