"""kmodels.seq2seq workloads: Translator train step and generation, and the
BiGRU encoder with and without a padding mask."""

import contextlib
import functools
import inspect

import numpy as np

from benchmarks import data
from benchmarks import flops
from benchmarks import matmul
from benchmarks.child import require
from benchmarks.timing import PROFILE
from benchmarks.timing import measure
from benchmarks.timing import measure_alternating


def _translator(sizes, **kwargs):
    import keras

    Translator = require("kmodels.seq2seq", "Translator")
    keras.utils.set_random_seed(0)
    parameters = inspect.signature(Translator).parameters
    if "start_id" in parameters:
        kwargs["start_id"] = data.START_ID
    if "end_id" in parameters:
        kwargs["end_id"] = data.END_ID
    return Translator(
        sizes["vocabulary"],
        sizes.get("target_vocabulary", sizes["vocabulary"]),
        sizes["units"],
        **kwargs,
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
    compilation: compiled on TensorFlow and JAX, eager on torch). Then,
    in the same process, the step's matmul floor (`_matmul_floor`)."""
    step, target_in = _translator_step(sizes, contracts=True)
    stats = measure(step, **timing)
    return dict(
        stats,
        flops=_train_flops(sizes, target_in),
        **_matmul_floor(sizes, target_in, timing),
    )


def _matmul_floor(sizes, target_in, timing):
    """`matmul_floor_ms`, the step's matrix products at the GFLOP/s this
    backend's matmul reaches on each of their shapes in this process
    (`benchmarks.matmul.matmul_floor`), and `matmul_floor`, its table per
    shape. Each shape: `min_steps` timings (5 in a full run) of about
    `2 x max_seconds` ms each (16 ms)."""
    products = flops.seq2seq_train_products(
        sizes["batch"],
        sizes["source_length"],
        target_in.shape[1],
        sizes["vocabulary"],
        sizes["units"],
    )
    rate = functools.partial(
        matmul.shape_rate,
        reps=timing["min_steps"],
        min_ms=2.0 * timing["max_seconds"],
    )
    floor_ms, table = matmul.matmul_floor(products, rate=rate)
    return {"matmul_floor_ms": floor_ms, "matmul_floor": table}


def train_step_unchecked(sizes, timing):
    """`train_step` without the input contracts, timed in alternation with
    a model that has them, in the same process: the two steps take turns,
    in alternating order, so machine noise and warm-up hit both alike.
    Returns the unchecked step's times, and the median of the checked
    steps as `contracts_on_ms`."""
    checked_step, _ = _translator_step(sizes, contracts=True)
    unchecked_step, target_in = _translator_step(sizes, contracts=False)
    unchecked, checked = measure_alternating(
        unchecked_step, checked_step, timing
    )
    return dict(
        unchecked,
        contracts_on_ms=checked["median_ms"],
        flops=_train_flops(sizes, target_in),
    )


def generate(sizes, timing):
    """Greedy `Translator.generate` on right-padded sequences; the end
    token's logit is pushed to -1e9 (as for the tutorial's loop) so every
    sequence runs `max_length` steps."""
    return _generate(sizes, timing)


_BEAM = dict(sampler="beam", num_beams=4)


def generate_beam(sizes, timing):
    """`generate(..., sampler="beam", num_beams=4)`, as `generate`; timed
    in alternation with greedy `generate` on the same model (its median:
    `greedy_alternated_ms`)."""
    return _generate(sizes, timing, partner=("greedy", {}), **_BEAM)


def generate_beam_constrained(sizes, timing):
    """`generate_beam` with `no_repeat_ngram_size=3` and
    `length_penalty=1.0` (issue 30: within 1.3x of plain beam search),
    timed in alternation with plain beam search (`beam_alternated_ms`)."""
    return _generate(
        sizes,
        timing,
        partner=("beam", _BEAM),
        no_repeat_ngram_size=3,
        length_penalty=1.0,
        **_BEAM,
    )


def generate_top_k(sizes, timing):
    """`generate(..., sampler="top_k", k=10, temperature=1.0)`, seeded,
    timed in alternation with greedy `generate` (`greedy_alternated_ms`)."""
    return _generate(
        sizes,
        timing,
        partner=("greedy", {}),
        sampler="top_k",
        k=10,
        temperature=1.0,
        seed=0,
    )


def _generate(sizes, timing, partner=None, **kwargs):
    """Times `model.generate(context, **kwargs)`. With `partner = (name,
    partner_kwargs)`, the calls take turns with `generate(context,
    **partner_kwargs)` on the same model (`measure_alternating`), and the
    partner's median is returned as `<name>_alternated_ms`: the ratio
    targets divide by it, so that a slower phase of the machine hits both
    (torch's eager decoding loops moved 27% between processes)."""
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

    def call(arguments, key):
        ids = model.generate(
            context, max_length=sizes["max_length"], **arguments
        )
        if isinstance(ids, (tuple, list)):
            ids = ids[0]
        out[key] = keras.ops.convert_to_numpy(ids)

    def step():
        call(kwargs, "ids")

    extra = {}
    if partner is None:
        stats = measure(step, **timing)
    else:
        name, partner_kwargs = partner
        stats, partner_stats = measure_alternating(
            step, lambda: call(partner_kwargs, "partner"), timing
        )
        extra[f"{name}_alternated_ms"] = partner_stats["median_ms"]
    batch, steps = out["ids"].shape[0], out["ids"].shape[-1]
    return dict(
        stats,
        **extra,
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


MIXED_POLICY = "mixed_bfloat16"


@contextlib.contextmanager
def dtype_policy(name):
    """Keras' global dtype policy `name` inside the block (layers keep the
    policy they were built under); the previous one afterwards."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def train_step_bf16(sizes, timing):
    """`train_step` with the model built under the `mixed_bfloat16` policy:
    bfloat16 computations, float32 variables (and float32 loss, as Keras
    casts the logits of the loss)."""
    with dtype_policy(MIXED_POLICY):
        step, target_in = _translator_step(sizes, contracts=True)
    # One warm-up call and 3 steps at least: without bfloat16 instructions a
    # step can take tens of seconds (torch on a CPU without AVX512-BF16).
    timing = dict(
        timing,
        warmup=min(timing["warmup"], 1),
        min_steps=min(timing["min_steps"], 3),
    )
    stats = measure(step, **timing)
    return dict(
        stats, dtype_policy=MIXED_POLICY, flops=_train_flops(sizes, target_in)
    )


@contextlib.contextmanager
def _no_profile():
    saved = dict(PROFILE)
    PROFILE["dir"] = None
    try:
        yield
    finally:
        PROFILE.update(saved)


# The parts of the train step, in the order of the "where the time goes"
# table; "backward" is what the others leave of the whole step.
BREAKDOWN_PARTS = (
    "recurrence_forward",
    "projection_forward",
    "loss_forward",
    "backward",
    "optimizer",
)


def train_breakdown(sizes, timing):
    """Where the time of `train_step` goes, by timing separately compiled
    sub-computations of the same sizes in the same process (each through
    Keras' own `predict_on_batch` / `train_on_batch`, so compiled as the
    backend compiles the train step):

    - `recurrence_forward`: the Translator's forward pass
      (`predict_on_batch`) minus `projection_forward`: the embeddings, the
      BiGRU encoder, the GRU decoder and the cross-attention;
    - `projection_forward`: the output `Dense(vocabulary)` alone, on
      features of the decoder's shape;
    - `loss_forward`: `masked_loss` on logits and targets;
    - `optimizer`: `train_on_batch` of a model holding variables of the
      Translator's trainable shapes whose loss is their sum: Adam's update
      (fused on torch, as the Translator's) plus the train step's fixed
      cost (and a sum and a fill of the variables' size);
    - `backward`: the whole step minus all the above: the gradients of the
      recurrence, the projection and the loss (with any fusion the whole
      step gains over its parts).

    The projection and loss parts have the fixed cost of one
    `predict_on_batch` call (`call_overhead_ms`, of an identity on one
    number) subtracted (the recurrence's cancels in the difference).
    Returns the whole step's times and `parts_ms` (medians)."""
    import keras
    from keras import ops

    masked_loss = require("kmodels.seq2seq", "masked_loss")
    step, target_in = _translator_step(sizes, contracts=True)
    whole = measure(step, **timing)
    (context, target_in), target_out = data.seq2seq_batch(sizes)
    length = target_in.shape[1]

    def median(function):
        # `--profile` profiles the whole step only.
        with _no_profile():
            return measure(function, **timing)["median_ms"]

    identity = keras.Sequential([keras.Input((1,)), keras.layers.Identity()])
    one = np.zeros((1, 1), "float32")
    overhead = median(lambda: identity.predict_on_batch(one))

    forward = _translator(sizes)
    forward.predict_on_batch((context, target_in))
    forward_ms = median(lambda: forward.predict_on_batch((context, target_in)))
    rng = np.random.default_rng(0)
    features = rng.standard_normal(
        (sizes["batch"], length, sizes["units"])
    ).astype("float32")

    projection = keras.Sequential(
        [
            keras.Input((length, sizes["units"])),
            keras.layers.Dense(sizes["vocabulary"]),
        ]
    )
    logits = projection.predict_on_batch(features)
    proj_ms = median(lambda: projection.predict_on_batch(features))

    class Loss(keras.Model):
        def call(self, inputs):
            y_pred, y_true = inputs
            return ops.reshape(masked_loss(y_true, y_pred), (1,))

    loss = Loss()
    loss_ms = median(lambda: loss.predict_on_batch((logits, target_out)))

    shapes = [tuple(w.shape) for w in forward.trainable_weights]

    class Variables(keras.Model):
        def __init__(self):
            super().__init__()
            self.held = [
                self.add_weight(shape=s, initializer="zeros") for s in shapes
            ]

        def call(self, x):
            return x * 0.0 + sum(ops.sum(w) for w in self.held)

    variables = Variables()
    variables(one)
    variables.compile(optimizer="adam", loss="mse")
    # The Translator's Adam is fused on torch (kmodels' models fuse at
    # compile); so is this one, for the part to be the step's.
    require("kmodels.backend.optimizers", "fuse_adam")(variables.optimizer)
    optimizer_ms = median(lambda: variables.train_on_batch(one, one))

    parts = {
        "recurrence_forward": forward_ms - proj_ms,
        "projection_forward": proj_ms - overhead,
        "loss_forward": loss_ms - overhead,
        "optimizer": optimizer_ms,
    }
    parts["backward"] = whole["median_ms"] - sum(parts.values())
    return dict(
        whole,
        parts_ms={name: parts[name] for name in BREAKDOWN_PARTS},
        call_overhead_ms=overhead,
        flops=_train_flops(sizes, target_in),
    )


# Issue 29 (item 3): the train step with and without the fused projection
# and loss on real target positions (`Translator(fused_loss=...)`).


def _fused_step(sizes, batch, fused_loss):
    """A compiled `Translator(fused_loss=fused_loss)` (Adam, `masked_loss`)
    and its one-batch train step on `batch`."""
    masked_loss = require("kmodels.seq2seq", "masked_loss")
    model = _translator(sizes, fused_loss=fused_loss)
    (context, target_in), target_out = batch
    model((context, target_in))
    model.compile(optimizer="adam", loss=masked_loss)
    return lambda: model.train_on_batch((context, target_in), target_out)


def _fused_against_dense(sizes, timing, batch):
    """The fused step timed in alternation with the dense one
    (`fused_loss=False`), in the same process; returns the fused step's
    times, the dense step's median as `dense_ms`, and `real_share`, the
    share of real target positions in the batch."""
    fused = _fused_step(sizes, batch, True)
    dense = _fused_step(sizes, batch, False)
    fused_stats, dense_stats = measure_alternating(fused, dense, timing)
    target_out = batch[1]
    return dict(
        fused_stats,
        dense_ms=dense_stats["median_ms"],
        real_share=float((target_out != 0).mean()),
        flops=flops.seq2seq_train_step(
            sizes["batch"],
            sizes["source_length"],
            target_out.shape[1],
            sizes.get("target_vocabulary", sizes["vocabulary"]),
            sizes["units"],
        ),
    )


def train_step_fused(sizes, timing):
    """`train_step`'s batch (about 25% padded target positions):
    `Translator(fused_loss=True)` against `fused_loss=False`, alternated."""
    return _fused_against_dense(sizes, timing, data.seq2seq_batch(sizes))


def train_step_dates(sizes, timing):
    """As `train_step_fused`, at the dates demo's sizes
    (`examples/seq2seq_dates.py`: batch 256, 64 units, vocabularies 236
    and 136) on a batch with its lengths (`data.dates_batch`)."""
    return _fused_against_dense(sizes, timing, data.dates_batch(sizes))
