"""Sentences in, sentences out: a `Translator` with its two `TextProcessor`s."""

import json
import os
import tempfile

import keras
import numpy as np

from kmodels.arguments import check_bool
from kmodels.arguments import check_int
from kmodels.arguments import check_str
from kmodels.export import saved_model
from kmodels.saving.atomic import SAVED_MODEL
from kmodels.saving.atomic import FolderLayout
from kmodels.saving.atomic import check_built
from kmodels.saving.atomic import check_replaceable
from kmodels.saving.atomic import write_atomically
from kmodels.saving.portable_optimizer import load_model
from kmodels.seq2seq import constraints
from kmodels.seq2seq import decoding
from kmodels.seq2seq import sampling
from kmodels.seq2seq.text_pairs import check_pairing
from kmodels.seq2seq.text_pairs import sources_and_references
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.translator import Translator

# A saved bundle's folder holds exactly these (named once, for the
# exporter that reads the bundle too).
_BUNDLE_FILES = (saved_model.MODEL_FILE, saved_model.TEXT_FILE)


def translate(
    texts,
    translator,
    context_processor,
    target_processor,
    max_length=None,
    temperature=0.0,
    seed=None,
    separator=" ",
    return_attention=False,
    sampler=None,
    return_scores=False,
    **options,
):
    """Translates sentences with a trained `Translator`.

    The decoding is `Translator.generate`'s, with the same arguments and
    checks: greedy by default, any sampler (`sampler="beam"`,
    `num_beams=4`...), and the constraints (`length_penalty`, `min_length`,
    `no_repeat_ngram_size`, `banned_ids`, `repetition_penalty`, `prefix`;
    `docs/decoding.md`).

    Args:
        texts: a str or a sequence of str.
        translator: a `kmodels.seq2seq.Translator`.
        context_processor: the `TextProcessor` of the source side.
        target_processor: the `TextProcessor` of the target side.
        max_length: int >= 1, generated tokens at most (`[END]` included);
            the target processor's `max_length` by default (`None`).
        temperature: 0 for greedy decoding, > 0 (finite) to sample (with
            `sampler=None`, the random sampler).
        seed: optional int in `[0, 2**31)`, makes sampling reproducible.
        separator: str joining the output tokens (`""` for dates).
        return_attention: bool, also return the attention weights.
        sampler: as `Translator.generate`'s (a name or a keras-hub sampler
            instance; `None`: greedy, or random at a temperature > 0).
        return_scores: bool, also return each translation's score (as
            `Translator.generate`'s: the log-probability, divided by
            `length ** length_penalty`).
        **options: the sampler's arguments (`num_beams`,
            `return_all_beams`, `k`, `p`), `num_return_sequences` (an int
            in `[1, num_beams]`, 1 but for beam search: the n best, as
            the export serves them; not with `return_all_beams`) and the
            constraints of
            `Translator.generate`, on target ids
            (`banned_ids=[target_processor.unk_id]` never produces
            `[UNK]`; `prefix=target_processor(...)` ids forces a start).

    Returns:
        A str for a str, else a list of str; with
        `return_all_beams=True`, every beam, best first: a list of str
        for a str, else a list of such lists; with
        `num_return_sequences=n`, the n best the same way (also for
        `n=1`). Then, as requested,
        `attention` (a float NumPy array `(batch, max_length,
        context_processor.max_length)`, with a beam axis after the batch
        for all beams) and `scores` (float32 `(batch,)` or `(batch,
        beams)`), in that order: `(translations, attention, scores)`.

    Raises:
        TypeError: an argument of the wrong type (`max_length=2.7` or
            `"3"`, `temperature="0.5"`, `separator=5`), named with what was
            expected and what arrived, before any text is processed (the
            error is also a `ValueError`).
        ValueError: `max_length < 1`, a negative or non-finite temperature,
            a constraint `Translator.generate` refuses, empty texts (see
            `TextProcessor`), or processors that do not match the
            translator (vocabulary sizes, start/end ids): their ids would
            be out of the model's range.
    """
    if not isinstance(translator, Translator):
        raise ValueError(
            "translate expects a kmodels.seq2seq.Translator; got "
            f"{type(translator).__name__}."
        )
    owner = "translate"
    if max_length is not None:
        max_length = sampling.check_max_length(max_length, owner)
    sampling.check_temperature(temperature, owner)
    sampling.check_seed(seed, owner)
    check_str(separator, "separator", owner)
    return_attention = check_bool(
        return_attention, "return_attention", owner, type_error=True
    )
    return_scores = check_bool(
        return_scores, "return_scores", owner, type_error=True
    )
    check_pairing(translator, context_processor, target_processor)
    length = target_processor.max_length if max_length is None else max_length
    count = options.pop("num_return_sequences", None)
    # Checked here too, before any text is processed.
    _, sampler_kwargs = constraints.split(
        options, length, translator.target_vocabulary_size, owner
    )
    if count is not None:
        count = sampling.check_count(
            count,
            options,
            sampler,
            temperature,
            seed,
            sampler_kwargs,
            translator.target_vocabulary_size,
            owner,
        )
    scalar = isinstance(texts, (str, bytes))
    tokens = context_processor(texts)
    # The source's placeholders, which the target's slots stand for.
    fill = None
    if target_processor.mask_placeholders:
        fill = context_processor.placeholders_in([texts] if scalar else texts)
    options = dict(
        sampler=sampler, temperature=temperature or None, seed=seed, **options
    )
    if len(tokens) == 0:
        # Checked as `generate` would, for the shapes of an empty batch.
        request = sampling.plan(
            sampler,
            options["temperature"],
            seed,
            sampler_kwargs,
            translator.target_vocabulary_size,
            owner,
        )
        beams = (request.num_beams,) if request.return_all_beams else ()
        ids = np.zeros((0, *beams, length), "int32")
        attention = np.zeros((0, *beams, length, tokens.shape[1]), "float32")
        scores = np.zeros((0, *beams), "float32")
    else:
        ids, attention, scores = map(
            keras.ops.convert_to_numpy,
            translator.generate(
                tokens, max_length=length, return_scores=True, **options
            ),
        )
    if count is not None:
        # The `count` best: a beam axis of `count`, also for one sequence.
        if ids.ndim == 2:
            ids, attention, scores = (
                ids[:, None],
                attention[:, None],
                scores[:, None],
            )
        ids, attention, scores = (
            ids[:, :count],
            attention[:, :count],
            scores[:, :count],
        )
    if ids.ndim == 3:
        # Every beam: a list of translations per text.
        out = [
            target_processor.decode(
                row, separator, fill and [fill[n]] * len(row)
            )
            for n, row in enumerate(ids)
        ]
    else:
        out = target_processor.decode(ids, separator, fill or None)
    if scalar:
        out = out[0]
    extras = (attention,) * return_attention + (scores,) * return_scores
    return (out, *extras) if extras else out


class TextTranslator:
    """A `Translator` bundled with its text processors: strings in and out,
    saved to and loaded from one folder.

    Args:
        translator: a `kmodels.seq2seq.Translator`.
        context_processor: `TextProcessor` of the source side.
        target_processor: `TextProcessor` of the target side.
        separator: str joining output tokens (`" "` for words, `""` for
            the date task); anything else raises a `TypeError`.

    Example:

    >>> from kmodels.seq2seq import Translator
    >>> src, tgt = TextProcessor(8), TextProcessor(8)
    >>> src.adapt(["hola", "casa"]); tgt.adapt(["hello", "house"])
    >>> model = Translator(src.vocabulary_size, tgt.vocabulary_size, 4)
    >>> bundle = TextTranslator(model, src, tgt)
    >>> isinstance(bundle.translate("hola"), str)
    True
    """

    def __init__(
        self, translator, context_processor, target_processor, separator=" "
    ):
        check_str(separator, "separator", "TextTranslator")
        check_pairing(translator, context_processor, target_processor)
        self.translator = translator
        self.context_processor = context_processor
        self.target_processor = target_processor
        self.separator = separator

    def translate(self, texts, **kwargs):
        """`translate(texts, ...)` with this bundle's model and processors;
        keyword arguments as in `kmodels.seq2seq.text_translator`."""
        kwargs.setdefault("separator", self.separator)
        return translate(
            texts,
            self.translator,
            self.context_processor,
            self.target_processor,
            **kwargs,
        )

    __call__ = translate

    def evaluate(self, pairs, max_order=4, smooth=False, **kwargs):
        """BLEU and exact match of this bundle's translations of `pairs`.

        The sources are translated in one batch with `translate` (greedy by
        default); BLEU is the corpus BLEU of `keras_hub.metrics.Bleu`
        (SacreBLEU's `13a` tokenisation, one reference per source, no
        smoothing by default) and exact match the share of translations
        equal to their reference, character for character (so write the
        references as the bundle writes its output: `"2021-03-03"` for
        dates, lower-case space-separated tokens for words).

        With a separator other than `" "` (`""` for dates), BLEU counts the
        target processor's units, not `13a` tokens: each translation and
        reference is first split as `TextProcessor` splits a text
        (standardised, punctuation apart: `"2021-03-03"` is `2021 - 03 -
        03`, the tokens the model wrote), then scored space-joined. Joined
        by `""`, a translation would otherwise be one or two `13a` tokens
        and BLEU 0 for nearly any output.

        `pairs` is read in one of two ways, told apart by its type, as Keras
        reads `(x, y)`: a *tuple* of two lists, `(sources, references)`, is
        the sources and their references (`(["a", "b"], ["x", "y"])` is two
        pairs, `("a", "x")` and `("b", "y")`); any other sequence (a list,
        a generator) holds `(source, reference)` pairs.

        Args:
            pairs: a sequence of `(source, reference)` str pairs, or a tuple
                `(sources, references)` of two lists of str of the same
                length.
            max_order: int, the longest n-gram BLEU counts (4, as usual).
            smooth: bool, Lin et al. (2004) smoothing of `Bleu`.
            **kwargs: passed to `translate` (`max_length`, `temperature`,
                `seed`, `separator`).

        Returns:
            A dict: `"bleu"` (float in [0, 1]; 0 when no translation has a
            token), `"exact_match"` (float in [0, 1]) and `"count"` (int,
            the number of pairs).

        Raises:
            TypeError: `pairs` is a str, an item is not a pair of str, or
                `(sources, references)` holds something else than str (the
                error is also a `ValueError`).
            ValueError: `pairs` is empty, `sources` and `references` differ
                in length, a reference is blank (BLEU has no length to
                compare with), `max_order` is not an int >= 1 or `smooth`
                not a bool; the errors of `translate` (an empty source).

        Example:

        >>> scores = bundle.evaluate([("March 3, 2021", "2021-03-03")])
        >>> sorted(scores)
        ['bleu', 'count', 'exact_match']
        >>> bundle.evaluate((["March 3, 2021"], ["2021-03-03"])) == scores
        True
        """
        import keras_hub

        owner = "TextTranslator.evaluate"
        max_order = check_int(max_order, "max_order", owner)
        smooth = check_bool(smooth, "smooth", owner)
        sources, references = sources_and_references(pairs, owner)
        for i, (source, reference) in enumerate(zip(sources, references)):
            if not reference.strip():
                raise ValueError(
                    f"{owner}: the reference of item {i} "
                    f"({(source, reference)!r}) is blank; BLEU needs a "
                    "reference length."
                )
        translations = self.translate(sources, **kwargs)
        separator = kwargs.get("separator", self.separator)
        hypotheses, targets = translations, references
        if separator != " ":
            # Joined without spaces ("2021-03-03"), an output is one or two
            # `13a` tokens: BLEU would be 0 for nearly every sentence. Both
            # sides are split into the target processor's units first.
            units = self.target_processor._words
            hypotheses = [" ".join(units(t)) for t in translations]
            targets = [" ".join(units(r)) for r in references]
        bleu = keras_hub.metrics.Bleu(max_order=max_order, smooth=smooth)
        # With no translated token keras-hub's brevity penalty divides by
        # zero in NumPy (exp(-inf) = 0): BLEU 0, without the warning.
        with np.errstate(divide="ignore"):
            bleu.update_state([[r] for r in targets], hypotheses)
        score = float(keras.ops.convert_to_numpy(bleu.result()))
        matches = sum(t == r for t, r in zip(translations, references))
        return {
            "bleu": score,
            "exact_match": matches / len(sources),
            "count": len(sources),
        }

    def save(self, path):
        """Writes the bundle to folder `path`: `translator.keras` and
        `text.json`, all or nothing.

        The bundle is written to a hidden folder beside `path`, then swapped
        in (the old folder renamed aside, the new one renamed in, the old
        one deleted; restored if the swap fails): whatever fails, `path`
        holds either the previous bundle, byte-identical, or the new one,
        never a mix.

        Args:
            path: str or path-like, a folder (created if missing, with its
                parents): new, empty, or holding a previous bundle and
                nothing else.

        Raises:
            ValueError: the translator was never called or built (it has no
                weights yet), or `path` is a file or a folder holding other
                files than a bundle's (the save replaces the whole folder and
                deletes only what a save writes; files added while it runs
                are kept too). Nothing is written. Errors name `path`, never
                the hidden working folder.
        """
        check_built(self.translator, "TextTranslator.save")
        path = os.fspath(path)
        bundle = FolderLayout("a TextTranslator bundle", _BUNDLE_FILES)
        check_replaceable(path, bundle, "TextTranslator.save")
        config = {
            "context_processor": self.context_processor.get_config(),
            "target_processor": self.target_processor.get_config(),
            "separator": self.separator,
        }
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)

        def write(staged):
            os.mkdir(staged)
            self.translator.save(os.path.join(staged, _BUNDLE_FILES[0]))
            with open(os.path.join(staged, _BUNDLE_FILES[1]), "w") as f:
                json.dump(config, f, ensure_ascii=False, indent=1)

        write_atomically(path, write, bundle, "TextTranslator.save")

    def export(
        self,
        path,
        max_length=None,
        sampler="greedy",
        num_beams=4,
        num_return_sequences=1,
        **options,
    ):
        """Writes a TensorFlow SavedModel that translates strings with
        TensorFlow alone: no kmodels, no Keras, no Python text code.

        Its `translate` function (also the `"translate"` signature) takes a
        1-D string tensor and returns a 1-D string tensor: the source
        processor's standardisation (NFKD, lower case, dropped characters,
        punctuation tokens, `split_digits`), the vocabulary lookup (words)
        or keras-hub's WordPiece (`tokenizer="wordpiece"`, rewritten in
        core TensorFlow ops), truncation to its `max_length`, the encoder,
        the greedy decoding loop (`Translator.generate_step`) and the
        detokenisation (`##` pieces glued back) with this bundle's
        `separator`, all in one graph. On the same texts it returns the
        strings of `translate(texts)` (greedy), with one difference: a text
        with no word left after standardisation (`""`, `"日本"`), for which
        `translate` raises a `ValueError`, gives `""` (a serving batch is
        not failed for one empty request). The SavedModel's functions
        `tokenize` (strings to the source ids, `(batch, max_length)`
        int32, as `context_processor(texts)`) and `detokenize` (target ids
        to strings, as `target_processor.decode`) are the two text ends on
        their own.

        Beam search and the constraints are served too: with
        `sampler="beam"` (or any constraint), `translate` returns the best
        translation of `translate(texts, sampler="beam", num_beams=...,
        length_penalty=..., ...)`, and the `nbest` function and signature
        return `{"translations": (batch, num_return_sequences) strings,
        "scores": (batch, num_return_sequences) float32}`, best first, the
        strings and scores of `translate(..., return_all_beams=True,
        return_scores=True)` (an empty text: `""` at `-inf`). keras-hub's
        beam loop is traced into the graph (`Translator.search_step`):
        plain TensorFlow ops, no custom op. `nbest` is there for greedy
        exports too (one sequence).

        Only TensorFlow writes a SavedModel: the bundle is saved to a
        temporary folder and exported from there, on the TensorFlow backend
        in this process (a few seconds), on JAX and torch by a TensorFlow
        worker process running `kmodels.export.saved_model` with
        `KERAS_BACKEND=tensorflow` (a few seconds; the first export of a
        process adds TensorFlow's import), so a model trained on JAX or
        torch exports the same way. The SavedModel
        is written next to `path` and swapped in, all or nothing.

        The export never deletes what it did not write: `path` may be new,
        empty, or a previous export holding only what an export writes
        (`saved_model.pb`, `fingerprint.pb`, `variables/variables.index`
        and `.data-*`, an empty `assets/`). Any other file or folder in it
        (a `README.txt`, `assets.extra/`) makes the export refuse, naming
        it, before anything is written; one added while the export runs
        makes it refuse at the swap and leave the folder as it was. Move
        such files out, or export to a new folder (see `docs/export.md`).

        Args:
            path: str or path-like, the SavedModel folder: new, empty, or a
                previous export (replaced).
            max_length: optional int, generated tokens at most (`[END]`
                included); the target processor's `max_length` by default.
            sampler: `"greedy"` (default) or `"beam"`.
            num_beams: int >= 1, beam search's width.
            num_return_sequences: int in `[1, num_beams]` (1 for greedy),
                the translations `nbest` returns per text.
            **options: the decoding constraints of `Translator.generate`
                (`length_penalty`, `min_length`, `no_repeat_ngram_size`,
                `banned_ids`, `repetition_penalty`, `prefix`; target ids).

        Raises:
            ValueError: a search argument `Translator.search_step` refuses
                (checked before anything is written), a processor uses
                settings the export cannot express
                (`standardize="unicode"`), the translator has
                no weights yet, or `path` is a
                file or a folder holding other entries than a SavedModel
                export (the message names them). Nothing is written.
            RuntimeError: the export failed (its error output is
                in the message, with `path` where TensorFlow named the
                hidden working folder).

        Example:

        >>> bundle.export("dates_saved_model")
        >>> # In a process with TensorFlow only:
        >>> import tensorflow as tf
        >>> served = tf.saved_model.load("dates_saved_model")
        >>> served.translate(tf.constant(["March 3, 2021"]))
        <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'2021-03-03'])>
        """
        owner = "TextTranslator.export"
        check_built(self.translator, owner)
        saved_model.check_processors(
            self.context_processor.get_config(),
            self.target_processor.get_config(),
            owner,
        )
        if max_length is not None:
            # The same check (and errors) as `translate`'s.
            max_length = sampling.check_max_length(max_length, owner)
        request, count, limits = decoding.check_search(
            self.translator,
            self.target_processor.max_length
            if max_length is None
            else max_length,
            sampler,
            num_beams,
            num_return_sequences,
            options,
            owner,
        )
        search = None
        if sampler != "greedy" or count != 1 or limits.active:
            search = dict(
                sampler=sampler,
                num_beams=request.num_beams,
                num_return_sequences=count,
                **limits.options,
            )
        path = os.fspath(path)
        check_replaceable(path, SAVED_MODEL, "TextTranslator.export")
        with tempfile.TemporaryDirectory() as work:
            bundle = os.path.join(work, "bundle")
            self.save(bundle)
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            write_atomically(
                path,
                lambda staged: saved_model.export_bundle(
                    bundle, staged, max_length, search
                ),
                SAVED_MODEL,
                "TextTranslator.export",
            )

    @classmethod
    def load(cls, path):
        """The `TextTranslator` saved in folder `path`."""
        translator = load_model(os.path.join(path, _BUNDLE_FILES[0]))
        with open(os.path.join(path, _BUNDLE_FILES[1])) as f:
            config = json.load(f)
        return cls(
            translator,
            TextProcessor.from_config(config["context_processor"]),
            TextProcessor.from_config(config["target_processor"]),
            separator=config["separator"],
        )
