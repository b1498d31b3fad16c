"""kmodels.seq2seq workloads: Translator train step and generation, and the
BiGRU encoder with and without a padding mask."""

import contextlib
import functools
import inspect
import time

import numpy as np

from benchmarks import data
from benchmarks import flops
from benchmarks.child import require
from benchmarks.timing import measure
from benchmarks.timing import summarize


def _translator(sizes):
    import keras

    Translator = require("kmodels.seq2seq", "Translator")
    keras.utils.set_random_seed(0)
    kwargs = {}
    parameters = inspect.signature(Translator).parameters
    if "start_id" in parameters:
        kwargs["start_id"] = data.START_ID
    if "end_id" in parameters:
        kwargs["end_id"] = data.END_ID
    return Translator(
        sizes["vocabulary"], sizes["vocabulary"], sizes["units"], **kwargs
    )


def _translator_step(sizes, contracts):
    """A compiled `Translator` and its one-batch train step; with
    `contracts=False`, Keras' own entry point and step, without kmodels'
    input-contract hook, and the layers' own checks off."""
    import keras

    masked_loss = require("kmodels.seq2seq", "masked_loss")
    model = _translator(sizes)
    scope = contextlib.nullcontext
    if not contracts:
        model.train_on_batch = functools.partial(
            keras.Model.train_on_batch, model
        )
        model.make_train_function = functools.partial(
            keras.Model.make_train_function, model
        )
        # torch's eager step would run the layers' own checks otherwise.
        scope = require("kmodels.contracts", "checked")
    (context, target_in), target_out = data.seq2seq_batch(sizes)
    model((context, target_in))
    model.compile(optimizer="adam", loss=masked_loss)

    def step():
        with scope():
            return model.train_on_batch((context, target_in), target_out)

    return step, target_in


def _train_flops(sizes, target_in):
    return flops.seq2seq_train_step(
        sizes["batch"],
        sizes["source_length"],
        target_in.shape[1],
        sizes["vocabulary"],
        sizes["units"],
    )


def train_step(sizes, timing):
    """`kmodels.seq2seq.Translator` + Adam + `masked_loss`, one
    `train_on_batch` per step on a right-padded batch (backend's default
    compilation: compiled on TensorFlow and JAX, eager on torch)."""
    step, target_in = _translator_step(sizes, contracts=True)
    stats = measure(step, **timing)
    return dict(stats, flops=_train_flops(sizes, target_in))


def train_step_unchecked(sizes, timing):
    """`train_step` without the input contracts, timed in alternation with
    a model that has them, in the same process: the two steps take turns,
    in alternating order, so machine noise and warm-up hit both alike.
    Returns the unchecked step's times, and the median of the checked
    steps as `contracts_on_ms`."""
    checked_step, _ = _translator_step(sizes, contracts=True)
    unchecked_step, target_in = _translator_step(sizes, contracts=False)
    times = {True: [], False: []}
    # The step that runs first in a pair is measured a few % slower (seen
    # on JAX and torch, either way round): the order alternates (ABBA).
    orders = [
        ((True, checked_step), (False, unchecked_step)),
        ((False, unchecked_step), (True, checked_step)),
    ]

    def pair():
        for on, step in orders[len(times[True]) % 2]:
            t0 = time.perf_counter()
            step()
            times[on].append(time.perf_counter() - t0)

    pairs = measure(pair, **timing)
    timed = slice(timing["warmup"], timing["warmup"] + pairs["steps"])
    return dict(
        summarize(times[False][timed]),
        contracts_on_ms=summarize(times[True][timed])["median_ms"],
        flops=_train_flops(sizes, target_in),
    )


def generate(sizes, timing):
    """Greedy `Translator.generate` on right-padded sequences; the end
    token's logit is pushed to -1e9 (as for the tutorial's loop) so every
    sequence runs `max_length` steps."""
    return _generate(sizes, timing)


def generate_beam(sizes, timing):
    """`generate(..., sampler="beam", num_beams=4)`, as `generate`."""
    return _generate(sizes, timing, sampler="beam", num_beams=4)


def generate_top_k(sizes, timing):
    """`generate(..., sampler="top_k", k=10, temperature=1.0)`, seeded."""
    return _generate(
        sizes, timing, sampler="top_k", k=10, temperature=1.0, seed=0
    )


def _generate(sizes, timing, **kwargs):
    import keras

    model = _translator(sizes)
    (context, target_in), _ = data.seq2seq_batch(dict(sizes, target_length=2))
    model((context, target_in))
    output_layer = getattr(model.decoder, "output_layer", None)
    if output_layer is not None and sizes["vocabulary"] > data.END_ID:
        bias = np.zeros(sizes["vocabulary"], "float32")
        bias[data.END_ID] = -1e9
        output_layer.bias.assign(bias)
    out = {}

    def step():
        ids = model.generate(context, max_length=sizes["max_length"], **kwargs)
        if isinstance(ids, (tuple, list)):
            ids = ids[0]
        out["ids"] = keras.ops.convert_to_numpy(ids)

    stats = measure(step, **timing)
    batch, steps = out["ids"].shape[0], out["ids"].shape[-1]
    return dict(
        stats,
        tokens=int(batch * steps),
        flops=flops.seq2seq_generate(
            sizes["batch"],
            sizes["source_length"],
            steps,
            sizes["vocabulary"],
            sizes["units"],
        ),
    )


def _encoder_step(sizes, timing, encoder_layer):
    """Ids -> `encoder_layer` -> context, trained to a zero target with
    mean squared error (masked through the Keras mask when there is one)."""
    import keras

    rng = np.random.default_rng(0)
    ids = data.padded_tokens(
        rng, sizes["batch"], sizes["length"], sizes["vocabulary"]
    )
    inputs = keras.Input((sizes["length"],), dtype="int32")
    model = keras.Model(inputs, encoder_layer(inputs))
    model.compile(optimizer="adam", loss="mse")
    target = np.zeros(ids.shape + (sizes["units"],), "float32")
    stats = measure(lambda: model.train_on_batch(ids, target), **timing)
    return dict(
        stats,
        flops=flops.bigru_encoder_train_step(
            sizes["batch"], sizes["length"], sizes["units"]
        ),
    )


def _keras_bigru(sizes, mask_zero):
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.layers.Embedding(
                sizes["vocabulary"], sizes["units"], mask_zero=mask_zero
            ),
            keras.layers.Bidirectional(
                keras.layers.GRU(sizes["units"], return_sequences=True),
                merge_mode="sum",
            ),
        ]
    )


def bigru_unmasked(sizes, timing):
    """Embedding (no mask) + Bidirectional GRU: the fast path everywhere."""
    return _encoder_step(sizes, timing, _keras_bigru(sizes, mask_zero=False))


def bigru_masked_keras(sizes, timing):
    """Embedding(mask_zero=True) + Bidirectional GRU in plain Keras: on torch
    the mask sends GRU to its per-timestep loop."""
    return _encoder_step(sizes, timing, _keras_bigru(sizes, mask_zero=True))


def bigru_masked_kmodels(sizes, timing):
    """`kmodels.seq2seq.Encoder` (masked BiGRU)."""
    import keras

    Encoder = require("kmodels.seq2seq", "Encoder")
    keras.utils.set_random_seed(0)
    encoder = Encoder(sizes["vocabulary"], sizes["units"])
    return _encoder_step(sizes, timing, encoder)
