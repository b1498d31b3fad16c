"""Sentences in, sentences out: a `Translator` with its two `TextProcessor`s."""

import json
import os

import keras
import numpy as np

from kmodels.saving.atomic import check_built
from kmodels.saving.atomic import write_atomically
from kmodels.saving.portable_optimizer import load_model
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.translator import Translator

# A saved bundle's folder holds exactly these.
_BUNDLE_FILES = ("translator.keras", "text.json")


def _check_pairing(translator, context_processor, target_processor):
    sizes = (
        (
            "context_processor",
            context_processor.vocabulary_size,
            "context_vocabulary_size",
            translator.context_vocabulary_size,
        ),
        (
            "target_processor",
            target_processor.vocabulary_size,
            "target_vocabulary_size",
            translator.target_vocabulary_size,
        ),
    )
    for who, size, attr, expected in sizes:
        if size != expected:
            raise ValueError(
                f"{who} has {size} tokens but the translator's {attr} is "
                f"{expected}: its ids would be out of range (or mean other "
                "words). Build the Translator with the processors' "
                "vocabulary_size."
            )
    for attr in ("start_id", "end_id"):
        got, expected = (
            getattr(translator, attr),
            getattr(target_processor, attr),
        )
        if got != expected:
            raise ValueError(
                f"The translator's {attr} is {got} but the target "
                f"processor's is {expected}."
            )


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
):
    """Translates sentences with a trained `Translator`.

    Args:
        texts: a str or a sequence of str.
        translator: a `kmodels.seq2seq.Translator`.
        context_processor: the `TextProcessor` of the source side.
        target_processor: the `TextProcessor` of the target side.
        max_length: generated tokens at most (`[END]` included); the target
            processor's `max_length` by default.
        temperature: 0 for greedy decoding, > 0 to sample.
        seed: optional int, makes sampling reproducible.
        separator: str joining the output tokens (`""` for dates).
        return_attention: also return the attention weights.

    Returns:
        A str for a str, else a list of str; with `return_attention=True`,
        `(translations, attention)` where `attention` is a float NumPy array
        `(batch, max_length, context_processor.max_length)`.

    Raises:
        ValueError: empty texts (see `TextProcessor`), or processors that
            do not match the translator (vocabulary sizes, start/end ids):
            their ids would be out of the model's range.
    """
    if not isinstance(translator, Translator):
        raise ValueError(
            "translate expects a kmodels.seq2seq.Translator; got "
            f"{type(translator).__name__}."
        )
    _check_pairing(translator, context_processor, target_processor)
    scalar = isinstance(texts, (str, bytes))
    tokens = context_processor(texts)
    if max_length is None:
        max_length = target_processor.max_length
    if len(tokens) == 0:
        ids = np.zeros((0, max_length), "int32")
        attention = np.zeros((0, max_length, tokens.shape[1]), "float32")
    else:
        ids, attention = translator.generate(
            tokens, max_length=max_length, temperature=temperature, seed=seed
        )
        ids = keras.ops.convert_to_numpy(ids)
        attention = keras.ops.convert_to_numpy(attention)
    out = target_processor.decode(ids, separator=separator)
    if scalar:
        out = out[0]
    return (out, attention) if return_attention else out


class TextTranslator:
    """A `Translator` bundled with its text processors: strings in and out,
    saved to and loaded from one folder.

    Args:
        translator: a `kmodels.seq2seq.Translator`.
        context_processor: `TextProcessor` of the source side.
        target_processor: `TextProcessor` of the target side.
        separator: str joining output tokens (`" "` for words, `""` for
            the date task).

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
        _check_pairing(translator, context_processor, target_processor)
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
                parents).

        Raises:
            ValueError: the translator was never called or built (it has no
                weights yet), or `path` is a file or a folder holding other
                files than a bundle's (the save replaces the whole folder).
                Nothing is written.
        """
        check_built(self.translator, "TextTranslator.save")
        path = os.fspath(path)
        if os.path.lexists(path):
            if not os.path.isdir(path):
                raise ValueError(
                    f"TextTranslator.save expects a folder path; {path!r} is "
                    "a file."
                )
            others = sorted(set(os.listdir(path)) - set(_BUNDLE_FILES))
            if others:
                raise ValueError(
                    f"TextTranslator.save replaces the whole folder {path!r},"
                    f" which holds other files than a bundle's: {others[:5]}."
                    " Save to a new or empty folder."
                )
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

        write_atomically(path, write)

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
