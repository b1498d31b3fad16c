"""Sequence-to-sequence with attention (the TensorFlow NMT tutorial's model)
in Keras 3, the same on TensorFlow, JAX and torch."""

import importlib

import keras

from kmodels.seq2seq.autoencoder import Autoencoder
from kmodels.seq2seq.cross_attention import CrossAttention
from kmodels.seq2seq.decoder import Decoder
from kmodels.seq2seq.encoder import Encoder
from kmodels.seq2seq.free_cores import adapt_threads_to_load
from kmodels.seq2seq.losses import MaskedLoss
from kmodels.seq2seq.losses import masked_acc
from kmodels.seq2seq.losses import masked_loss
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.translator import Translator

__all__ = [
    "Autoencoder",
    "CrossAttention",
    "Decoder",
    "Encoder",
    "MaskedLoss",
    "TextProcessor",
    "TextTranslator",
    "Translator",
    "TranslatorBackbone",
    "TranslatorSeq2SeqLM",
    "TranslatorSeq2SeqLMPreprocessor",
    "adapt_threads_to_load",
    "masked_acc",
    "masked_loss",
]

# The keras-hub task imports keras-hub (and TensorFlow with it): only when
# one of its classes is asked for, not by `import kmodels.seq2seq`.
_TASK = {
    "TranslatorBackbone": "translator_backbone",
    "TranslatorSeq2SeqLM": "translator_seq_2_seq_lm",
    "TranslatorSeq2SeqLMPreprocessor": "translator_seq_2_seq_lm_preprocessor",
}


def _task_class(name):
    module = importlib.import_module(f"kmodels.seq2seq.{_TASK[name]}")
    return getattr(module, name)


def __getattr__(name):
    if name in _TASK:
        return _task_class(name)
    raise AttributeError(f"module 'kmodels.seq2seq' has no attribute {name!r}")


def _register_on_use(name):
    """Registers a stand-in for a task class under its Keras name, so that
    `import kmodels` alone loads a `.keras` file that holds one: Keras
    calls its `from_config`, which imports the real class (that import
    registers the real class in its place). keras-hub's `from_preset`
    needs the real class: import it first (docs/seq2seq.md)."""

    class OnUse:
        @classmethod
        def from_config(cls, config):
            return _task_class(name).from_config(config)

    OnUse.__name__ = OnUse.__qualname__ = name
    registered = f"kmodels>{name}"
    objects = keras.saving.get_custom_objects()
    if registered not in objects:
        objects[registered] = OnUse


for _name in _TASK:
    _register_on_use(_name)
