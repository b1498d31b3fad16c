"""Eager calls of a `Translator` on concrete arrays, as in a notebook,
beside `predict_on_batch` on the same inputs (issue 17).

The first call (it builds the model and, where kmodels caches a compiled
call, traces it) is timed apart as `first_call_ms`; the calls after it are
the measurement. `rss_growth_mb` is the growth of the process' resident
memory over the timed calls, after three warm-up calls (a leak shows as
growth per call).
"""

import time

from benchmarks import data
from benchmarks.child import require
from benchmarks.seq2seq import _translator
from benchmarks.timing import measure
from benchmarks.timing import summarize


def _resident_mb():
    """The process' resident memory (`VmRSS`) in MB, or None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _model_and_inputs(sizes):
    import keras

    model = _translator(sizes)
    (context, target_in), _ = data.seq2seq_batch(sizes)
    to_numpy = keras.ops.convert_to_numpy
    return model, (context, target_in), to_numpy


def eager_call(sizes, timing):
    """`translator((context, target_in))`, eagerly, on NumPy arrays."""
    model, inputs, to_numpy = _model_and_inputs(sizes)

    def step():
        return to_numpy(model(inputs))

    t0 = time.perf_counter()
    step()
    first_call_ms = (time.perf_counter() - t0) * 1e3
    # The first calls build and trace (kmodels compiles an eager call the
    # second time a signature is seen): memory is sampled after them.
    for _ in range(3):
        step()
    before = _resident_mb()
    stats = measure(step, **timing)
    after = _resident_mb()
    out = dict(stats, first_call_ms=first_call_ms)
    if before is not None and after is not None:
        out["rss_growth_mb"] = after - before
    return out


def predict_on_batch(sizes, timing):
    """`translator.predict_on_batch((context, target_in))` (the backend's
    compiled predict step) on the same inputs."""
    model, inputs, to_numpy = _model_and_inputs(sizes)

    def step():
        return to_numpy(model.predict_on_batch(inputs))

    t0 = time.perf_counter()
    step()
    first_call_ms = (time.perf_counter() - t0) * 1e3
    return dict(measure(step, **timing), first_call_ms=first_call_ms)


def _dates_bundle(sizes):
    """A `TextTranslator` with the dates example's processors and an
    untrained `Translator`: it never emits `[END]`, so `translate` runs
    every one of its `max_length` steps (the slowest case)."""
    import keras

    dates = require("kmodels.datasets", "dates")
    TextTranslator = require("kmodels.seq2seq", "TextTranslator")
    TextProcessor = require("kmodels.seq2seq", "TextProcessor")
    Translator = require("kmodels.seq2seq", "Translator")

    keras.utils.set_random_seed(0)
    (src, tgt), _ = dates.date_split(2000, 10, seed=0)
    source = TextProcessor(8, **dates.DATE_TEXT)
    target = TextProcessor(7, **dates.DATE_TEXT)
    source.adapt(src)
    target.adapt(tgt)
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        sizes["units"],
        start_id=target.start_id,
        end_id=target.end_id,
    )
    return TextTranslator(model, source, target, separator="")


def translate_one(sizes, timing):
    """`TextTranslator.translate` of one short sentence (a date) after the
    first call, which is timed apart as `first_call_ms`."""
    bundle = _dates_bundle(sizes)
    sentence = "Wednesday, March 3, 2021"

    def step():
        return bundle.translate(sentence)

    t0 = time.perf_counter()
    step()
    first_call_ms = (time.perf_counter() - t0) * 1e3
    return dict(measure(step, **timing), first_call_ms=first_call_ms)


def eager_memory(sizes, timing):
    """Resident-memory growth over `sizes["calls"]` eager calls of each
    seq2seq model and of `TextTranslator.translate`, after three warm-up
    calls each (`rss_growth_mb`: the largest growth; `rss_by_call`: each
    one's). The time is the median of the timed calls of all of them."""
    import keras
    import numpy as np

    from kmodels.seq2seq import Autoencoder
    from kmodels.seq2seq import CrossAttention
    from kmodels.seq2seq import Decoder
    from kmodels.seq2seq import Encoder

    bundle = _dates_bundle(sizes)
    units, calls = sizes["units"], sizes["calls"]
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 10, (2, 6)).astype("int32")
    tokens[1, 4:] = 0
    target = rng.integers(1, 10, (2, 5)).astype("int32")
    context = rng.normal(size=(2, 6, units)).astype("float32")
    x = rng.normal(size=(2, 5, units)).astype("float32")
    mask = tokens != 0
    encoder = Encoder(10, units)
    decoder = Decoder(10, units)
    attention = CrossAttention(units)
    autoencoder = Autoencoder(10, units)
    translator = bundle.translator
    source_tokens = bundle.context_processor(["march 3, 2021"] * 2)
    target_in = np.full((2, 6), translator.start_id, "int32")
    to_numpy = keras.ops.convert_to_numpy
    named = {
        "Encoder": lambda: encoder(tokens),
        "Decoder": lambda: decoder(context, target, context_mask=mask),
        "CrossAttention": lambda: attention(x, context, context_mask=mask),
        "Autoencoder": lambda: autoencoder(tokens),
        "Translator": lambda: translator((source_tokens, target_in)),
        "translate": lambda: bundle.translate("Wednesday, March 3, 2021"),
    }
    growth, times = {}, []
    for name, fn in named.items():
        for _ in range(3):
            fn()
        before = _resident_mb()
        for _ in range(calls):
            t0 = time.perf_counter()
            out = fn()
            if not isinstance(out, str):
                keras.tree.map_structure(to_numpy, out)
            times.append(time.perf_counter() - t0)
        after = _resident_mb()
        if before is not None and after is not None:
            growth[name] = after - before
    stats = summarize(times)
    if growth:
        stats["rss_growth_mb"] = max(growth.values())
        stats["rss_by_call"] = growth
    stats["calls"] = calls
    return stats
