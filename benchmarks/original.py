"""The original code's workloads: the TensorFlow "NMT with attention"
tutorial's model (`benchmarks.tutorial`), run under Keras 2 (`tf_keras`,
with `TF_USE_LEGACY_KERAS=1`) as users ran it before porting.
"""

from benchmarks import data
from benchmarks import flops
from benchmarks.timing import measure
from benchmarks.tutorial import tutorial_classes


def fit_step(model, x, y):
    """One step of `model.fit` on the batch `(x, y)`, as a callable that
    blocks until the step is done.

    The tutorial trains with `fit`, which makes its `tf.data` iterator once
    and runs the compiled train function on it once per step. Keras 2's
    `train_on_batch` makes and drops a `tf.data` iterator on every call
    instead, which costs about 110 ms at random (most likely a wait for the
    iterator's autotune thread): on 2026-12-07 the tutorial's train step
    took 180-230 ms or 305-320 ms per `train_on_batch` call in the same
    process, while its train function inside took 176-238 ms either way.
    That cost is the harness's, not the model's, so the original is timed
    here as `fit` runs it: one iterator over the batch repeated, the train
    function called once per step (docs/benchmarks.md, "Issue 48")."""
    import tensorflow as tf

    function = model.make_train_function()
    iterator = iter(tf.data.Dataset.from_tensors((x, y)).repeat())

    def step():
        logs = function(iterator)
        return float(logs["loss"])

    return step


def _translator(sizes):
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    tutorial = tutorial_classes()
    model = tutorial.Translator(
        sizes["units"], sizes["vocabulary"], data.START_ID, data.END_ID
    )
    return model, tutorial.masked_loss


def seq2seq_train_step(sizes, timing):
    """The tutorial's Translator, compiled as in the tutorial (Adam,
    `masked_loss`), one `fit` step per step (`fit_step`)."""
    model, masked_loss = _translator(sizes)
    (context, target_in), target_out = data.seq2seq_batch(sizes)
    model((context, target_in))
    model.compile(optimizer="adam", loss=masked_loss)
    stats = measure(fit_step(model, (context, target_in), target_out), **timing)
    t = target_in.shape[1]
    return dict(
        stats,
        flops=flops.seq2seq_train_step(
            sizes["batch"],
            sizes["source_length"],
            t,
            sizes["vocabulary"],
            sizes["units"],
        ),
    )


def translate(sizes, timing):
    """The tutorial's Python-loop `translate` (eager, greedy) on 64 right-
    padded sequences; the end token's logit is pushed to -1e9 so every call
    produces `max_length` tokens (same as for kmodels' `generate`)."""
    model, _ = _translator(sizes)
    sizes = dict(sizes, target_length=2)
    (context, target_in), _ = data.seq2seq_batch(sizes)
    model((context, target_in))
    bias = model.decoder.output_layer.bias
    bias.assign(bias.numpy() * 0 + _end_suppressed(sizes["vocabulary"]))
    out = {}

    def step():
        out["tokens"] = model.translate(
            context, max_length=sizes["max_length"]
        ).numpy()

    stats = measure(step, **timing)
    steps = out["tokens"].shape[1]
    return dict(
        stats,
        tokens=int(out["tokens"].shape[0] * steps),
        flops=flops.seq2seq_generate(
            sizes["batch"],
            sizes["source_length"],
            steps,
            sizes["vocabulary"],
            sizes["units"],
        ),
    )


def _end_suppressed(vocabulary):
    import numpy as np

    bias = np.zeros(vocabulary, "float32")
    bias[data.END_ID] = -1e9
    return bias


def encoder_train_step(sizes, timing):
    """The tutorial's Encoder (masked BiGRU) alone, trained to a zero target
    with mean squared error (the loss is masked through the Keras mask)."""
    import numpy as np
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    Encoder = tutorial_classes().Encoder
    rng = np.random.default_rng(0)
    ids = data.padded_tokens(
        rng, sizes["batch"], sizes["length"], sizes["vocabulary"]
    )
    inputs = tf_keras.Input((sizes["length"],), dtype="int32")
    model = tf_keras.Model(
        inputs, Encoder(sizes["vocabulary"], sizes["units"])(inputs)
    )
    model.compile(optimizer="adam", loss="mse")
    target = np.zeros(ids.shape + (sizes["units"],), "float32")
    stats = measure(fit_step(model, ids, target), **timing)
    return dict(
        stats,
        flops=flops.bigru_encoder_train_step(
            sizes["batch"], sizes["length"], sizes["units"]
        ),
    )
