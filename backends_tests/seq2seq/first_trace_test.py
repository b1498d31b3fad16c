"""A first `fit` or `evaluate` of kmodels' own models traces its step once.

Without a distribution strategy, Keras' TensorFlow trainer builds the
optimizer, the loss and the metrics inside the first trace of the step, and
`tf.function`, seeing variables created there, traces the step again: two
traces of the whole Translator step on every first `fit`. kmodels' models
build them from their batch spec before the trace
(`keras_internals.BuildWithoutData`). The step method runs once per trace
(TensorFlow, JAX) or once per batch (torch, eager): one batch, one call.
"""

import keras
import numpy as np
import pytest

from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_acc
from kmodels.seq2seq import masked_loss

VOCAB, UNITS = 9, 4


class _CountsSteps:
    """Counts the calls of the model's train and test step methods."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = {"train": 0, "test": 0}

    def train_step(self, *args, **kwargs):
        self.calls["train"] += 1
        return super().train_step(*args, **kwargs)

    def test_step(self, *args, **kwargs):
        self.calls["test"] += 1
        return super().test_step(*args, **kwargs)


class CountingTranslator(_CountsSteps, Translator):
    pass


class CountingAutoencoder(_CountsSteps, Autoencoder):
    pass


def _batch(rng):
    context = rng.integers(1, VOCAB, (2, 5)).astype("int32")
    target = rng.integers(1, VOCAB, (2, 4)).astype("int32")
    return (context, target), target


@pytest.mark.parametrize("metrics", [[], [masked_acc]], ids=["loss", "metric"])
def test_translator_traces_its_first_steps_once(rng, metrics):
    keras.utils.set_random_seed(0)
    model = CountingTranslator(VOCAB, VOCAB, units=UNITS)
    model.compile(keras.optimizers.Adam(0.01), masked_loss, metrics=metrics)
    x, y = _batch(rng)
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert model.calls == {"train": 1, "test": 0}
    model.evaluate(x, y, batch_size=2, verbose=0)
    assert model.calls == {"train": 1, "test": 1}


def test_autoencoder_traces_its_first_step_once(rng):
    keras.utils.set_random_seed(0)
    model = CountingAutoencoder(VOCAB, UNITS)
    model.compile(keras.optimizers.Adam(0.01), masked_loss)
    tokens = rng.integers(1, VOCAB, (2, 5)).astype("int32")
    model.fit(tokens, tokens, batch_size=2, epochs=1, verbose=0)
    assert model.calls == {"train": 1, "test": 0}
