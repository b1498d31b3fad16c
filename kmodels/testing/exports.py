"""Shared checks and fixtures of the save and export tests."""

import os

import keras
import numpy as np

from kmodels.saving.atomic import SAVED_MODEL
from kmodels.seq2seq.text_processor import TextProcessor
from kmodels.seq2seq.text_translator import TextTranslator
from kmodels.seq2seq.translator import Translator


def assert_only_a_saved_model(path):
    """Asserts that folder `path` holds exactly what TensorFlow 2.21's
    `tf.saved_model.save` writes for kmodels' exporters (one variables
    shard, an empty `assets/`), that `kmodels.saving.atomic.SAVED_MODEL`
    recognises it as a previous export, and that no working folder was
    left beside it."""
    assert sorted(os.listdir(path)) == [
        "assets",
        "fingerprint.pb",
        "saved_model.pb",
        "variables",
    ]
    assert os.listdir(os.path.join(path, "assets")) == []
    assert sorted(os.listdir(os.path.join(path, "variables"))) == [
        "variables.data-00000-of-00001",
        "variables.index",
    ]
    assert SAVED_MODEL.foreign_entries(path) == []
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]


def tiny_bundle(separator=" ", built=False):
    """A `TextTranslator` of word processors adapted on three Spanish and
    English phrases and a `Translator` of 4 units (seeded), built when
    `built`."""
    source = TextProcessor(max_length=6)
    source.adapt(["hola casa", "esta en casa", "hola"])
    target = TextProcessor(max_length=5)
    target.adapt(["hello house", "is at home", "hello"])
    keras.utils.set_random_seed(5)
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        4,
        start_id=target.start_id,
        end_id=target.end_id,
    )
    if built:
        model((np.array([[4, 5, 6, 0]]), np.array([[2, 4, 5]])))
    return TextTranslator(model, source, target, separator=separator)
