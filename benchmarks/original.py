"""The original code's workloads: the TensorFlow "NMT with attention"
tutorial's model (`benchmarks.tutorial`), run under Keras 2 (`tf_keras`,
with `TF_USE_LEGACY_KERAS=1`) as users ran it before porting.
"""

from benchmarks import data
from benchmarks import flops
from benchmarks.timing import measure
from benchmarks.tutorial import tutorial_classes


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
    `masked_loss`), one `train_on_batch` per step."""
    model, masked_loss = _translator(sizes)
    (context, target_in), target_out = data.seq2seq_batch(sizes)
    model((context, target_in))
    model.compile(optimizer="adam", loss=masked_loss)
    stats = measure(
        lambda: model.train_on_batch((context, target_in), target_out),
        **timing,
    )
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
    stats = measure(lambda: model.train_on_batch(ids, target), **timing)
    return dict(
        stats,
        flops=flops.bigru_encoder_train_step(
            sizes["batch"], sizes["length"], sizes["units"]
        ),
    )
