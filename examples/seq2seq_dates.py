"""Dates to ISO form, end to end: the seed's workflow on a real task.

    python -m examples.seq2seq_dates [--quick] [--epochs N] [--seconds N]
        [--out DIR] [--dtype-policy mixed_bfloat16]

1. Generate a parallel corpus of dates written many ways and their ISO form
   (`kmodels.datasets.dates`, no download) and adapt two `TextProcessor`s.
2. Pretrain the encoder as an `Autoencoder` (input = target = source ids).
3. Freeze it (`encoder.trainable = False`), build a `Translator` around it
   and train the decoder with `model.fit`.
4. Translate 500 held-out dates (sources never seen in training), print
   examples and the exact-match accuracy, save an attention heat map PNG.

`main()` returns a dict of the figures it printed. The run trains a fixed
amount of work (3 autoencoder epochs, 20 translator epochs), so its printed
accuracy is the same on any machine for a given backend and seed;
`--seconds N` trains for a time budget instead. `--quick` runs a tiny
version (no accuracy target) for tests.
"""

import argparse
import contextlib
import os
import time

import keras
import numpy as np

from kmodels.datasets.dates import DATE_TEXT
from kmodels.datasets.dates import date_split
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import TextTranslator
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_acc
from kmodels.seq2seq import masked_loss

# Heat map size in pixels (figure inches x dpi), fixed so tests can check it.
HEATMAP_INCHES = (6.0, 4.0)
HEATMAP_DPI = 100

FULL = dict(
    train=20000,
    test=500,
    units=64,
    batch_size=256,
    seconds=None,
    pretrain_share=0.2,
    pretrain_epochs=3,
    epochs=20,
    learning_rate=1e-2,
)
QUICK = dict(
    train=512,
    test=100,
    units=16,
    batch_size=64,
    seconds=None,
    pretrain_share=0.3,
    pretrain_epochs=1,
    epochs=2,
    learning_rate=1e-2,
)


class _Schedule(keras.callbacks.Callback):
    """Anneals the learning rate over the run (cosine, set at each epoch
    start) and, with a time budget of `seconds`, stops `fit` once they
    have passed (checked after each batch). Without `seconds` the schedule
    follows the epochs (`epochs` of them), the same on every machine; with
    it, the elapsed share of the budget, so a slower backend gets the same
    schedule over fewer steps."""

    def __init__(self, epochs, learning_rate, seconds=None, clock=None):
        super().__init__()
        self.epochs = epochs
        self.seconds = seconds
        self.learning_rate = learning_rate
        self.clock = clock or time.perf_counter

    def on_train_begin(self, logs=None):
        self.start = self.clock()

    def _share(self, epoch):
        if self.seconds is None:
            return epoch / self.epochs
        return min(1.0, (self.clock() - self.start) / self.seconds)

    def on_epoch_begin(self, epoch, logs=None):
        factor = 0.5 * (1.0 + np.cos(np.pi * self._share(epoch)))
        self.model.optimizer.learning_rate = self.learning_rate * max(
            factor, 0.02
        )

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(
                keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)
            )

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds is None:
            return
        if self.clock() - self.start > self.seconds:
            self.model.stop_training = True


def _fit(model, x, y, seconds, epochs, batch_size, learning_rate, clock):
    start = clock()
    history = model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=epochs,
        shuffle=True,
        callbacks=[_Schedule(epochs, learning_rate, seconds, clock)],
        verbose=0,
    )
    elapsed = clock() - start
    logs = {k: [float(v) for v in vs] for k, vs in history.history.items()}
    return elapsed, len(logs["loss"]), logs


@contextlib.contextmanager
def _dtype_policy(name):
    """Keras' global dtype policy `name` (`None`: unchanged) inside the
    block; the previous one afterwards."""
    previous = keras.config.dtype_policy()
    if name is not None:
        keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def save_attention_heatmap(path, source_tokens, output_tokens, attention):
    """Writes the attention of one translation as a PNG heat map.

    Args:
        path: str, the PNG file.
        source_tokens: list of str, the columns (context tokens).
        output_tokens: list of str, the rows (generated tokens).
        attention: float array `(len(output_tokens), len(source_tokens))`.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=HEATMAP_INCHES, dpi=HEATMAP_DPI)
    image = ax.matshow(attention, cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(source_tokens)))
    ax.set_xticklabels(source_tokens, rotation=90)
    ax.set_yticks(range(len(output_tokens)))
    ax.set_yticklabels(output_tokens)
    ax.set_xlabel("source token")
    ax.set_ylabel("generated token")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=HEATMAP_DPI)
    plt.close(fig)


def run(
    train,
    test,
    units,
    batch_size,
    seconds,
    pretrain_share,
    pretrain_epochs,
    epochs,
    learning_rate,
    out=None,
    seed=0,
    quiet=False,
    clock="wall",
    dtype_policy=None,
):
    """The whole workflow; returns a dict of its figures (see `main`).

    `dtype_policy` (e.g. `"mixed_bfloat16"`) is the global Keras dtype
    policy while the models are built, trained and used; the previous
    policy is restored on return."""
    with _dtype_policy(dtype_policy):
        say = (lambda *a: None) if quiet else print
        # "cpu": the budget counts this process' CPU seconds, a fair measure on
        # a machine shared with other jobs (for single-threaded torch it is the
        # wall time an idle machine would take).
        clock_name = clock
        clock = {"wall": time.perf_counter, "cpu": time.process_time}[clock]
        keras.utils.set_random_seed(seed)
        (train_src, train_tgt), (test_src, test_tgt) = date_split(
            train, test, seed=seed
        )
        # 8 source tokens at most ("[START] wednesday , march 3 , 2021 [END]",
        # "[START] the 3 rd of march 2021 [END]"); ISO targets are 7 tokens.
        source = TextProcessor(8, **DATE_TEXT)
        target = TextProcessor(7, **DATE_TEXT)
        source.adapt(train_src)
        target.adapt(train_tgt)
        x = source(train_src)
        y = target(train_tgt)
        y_in, y_out = y[:, :-1], y[:, 1:]
        say(
            f"backend {keras.backend.backend()}: {train} training pairs, "
            f"{test} held out; vocabularies {source.vocabulary_size} -> "
            f"{target.vocabulary_size}; units {units}; dtype policy "
            f"{keras.config.dtype_policy().name}"
        )

        # 1. Pretrain the encoder as an autoencoder: input = target.
        autoencoder = Autoencoder(source.vocabulary_size, units)
        autoencoder.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=masked_loss,
            metrics=[masked_acc],
        )
        pre_seconds, pre_epochs, pre_logs = _fit(
            autoencoder,
            x,
            x,
            None if seconds is None else seconds * pretrain_share,
            pretrain_epochs,
            batch_size,
            learning_rate,
            clock,
        )
        say(
            f"autoencoder: {pre_epochs} epochs in {pre_seconds:.1f} s, "
            f"masked_acc {pre_logs['masked_acc'][-1]:.4f}"
        )

        # 2. Freeze it and train the decoder around it.
        encoder = autoencoder.encoder
        encoder.trainable = False
        frozen = [keras.ops.convert_to_numpy(w) for w in encoder.weights]
        translator = Translator(
            target_vocabulary_size=target.vocabulary_size,
            encoder=encoder,
            start_id=target.start_id,
            end_id=target.end_id,
        )
        translator.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=masked_loss,
            metrics=[masked_acc],
        )
        fit_seconds, fit_epochs, fit_logs = _fit(
            translator,
            (x, y_in),
            y_out,
            # A margin for what fit does outside the callback's clock (setup,
            # the last epoch's end): measured up to ~3 s on a loaded machine.
            None if seconds is None else max(seconds - pre_seconds - 3.0, 1.0),
            epochs,
            batch_size,
            learning_rate,
            clock,
        )
        encoder_unchanged = all(
            np.array_equal(a, keras.ops.convert_to_numpy(w))
            for a, w in zip(frozen, encoder.weights)
        )
        say(
            f"translator (encoder frozen): {fit_epochs} epochs in "
            f"{fit_seconds:.1f} s, masked_acc "
            f"{fit_logs['masked_acc'][-1]:.4f}; "
            f"encoder weights unchanged: {encoder_unchanged}"
        )

        # 3. Translate held-out dates.
        bundle = TextTranslator(translator, source, target, separator="")
        start = time.perf_counter()
        # Tokens joined by spaces first (they label the heat map), then as the
        # bundle's separator ("") joins them: "2021 - 03 - 03" -> "2021-03-03".
        spaced, attention = bundle.translate(
            test_src, separator=" ", return_attention=True
        )
        translate_seconds = time.perf_counter() - start
        predictions = [p.replace(" ", "") for p in spaced]
        correct = [p == t for p, t in zip(predictions, test_tgt)]
        accuracy = float(np.mean(correct))
        examples = list(zip(test_src, predictions, test_tgt))
        for src, pred, tgt in examples[:8]:
            mark = "ok " if pred == tgt else "BAD"
            say(f"  {mark} {src!r:36} -> {pred!r:14} (expected {tgt!r})")
        errors = [e for e, ok in zip(examples, correct) if not ok]
        for src, pred, tgt in errors[:4]:
            say(f"  error: {src!r} -> {pred!r} (expected {tgt!r})")
        # BLEU over the tokens ("2021 - 03 - 03"): with the bundle's ""
        # separator a date would be one token and BLEU's n-grams empty.
        references = target.decode(target(test_tgt), separator=" ")
        quality = bundle.evaluate(
            list(zip(test_src, references)), separator=" "
        )
        say(
            f"BLEU {quality['bleu']:.4f}, exact match "
            f"{quality['exact_match']:.4f} (TextTranslator.evaluate)"
        )
        say(
            f"exact match on {test} held-out dates: {accuracy:.4f} "
            f"({sum(correct)}/{test}); training "
            f"{pre_seconds + fit_seconds:.1f} s "
            f"({clock_name} clock)"
            f"; translating {translate_seconds:.2f} s"
        )

        result = {
            "backend": keras.backend.backend(),
            "dtype_policy": keras.config.dtype_policy().name,
            "accuracy": accuracy,
            "bleu": quality["bleu"],
            "held_out": test,
            "train_pairs": train,
            "units": units,
            "clock": clock_name,
            "pretrain_seconds": pre_seconds,
            "pretrain_epochs": pre_epochs,
            "pretrain_masked_acc": pre_logs["masked_acc"][-1],
            "train_seconds": fit_seconds,
            "train_epochs": fit_epochs,
            "train_masked_acc": fit_logs["masked_acc"][-1],
            "train_history": fit_logs,
            "total_train_seconds": pre_seconds + fit_seconds,
            "translate_seconds": translate_seconds,
            "encoder_unchanged": encoder_unchanged,
            "examples": examples[:8],
            "errors": errors,
            "heatmap": None,
        }

        # 4. Attention heat map of the first held-out example.
        if out is not None:
            os.makedirs(out, exist_ok=True)
            path = os.path.join(out, "attention.png")
            # The first held-out example, from the batch translated above (one
            # compiled generation, no retrace for a batch of one).
            src_tokens = source.tokenize(test_src[0])
            out_tokens = spaced[0].split()
            length = len(out_tokens)
            save_attention_heatmap(
                path,
                src_tokens,
                out_tokens,
                attention[0, :length, : len(src_tokens)],
            )
            result["heatmap"] = path
            say(f"attention heat map: {path}")
        return result


def main(argv=None):
    """Runs the demo; returns the dict of figures.

    Keys: `backend`, `dtype_policy` (the global Keras policy of the run,
    `--dtype-policy`), `accuracy` (exact match in [0, 1]), `bleu` (corpus
    BLEU of `TextTranslator.evaluate`, in [0, 1]), `held_out`,
    `train_pairs`, `units`, `clock`, `pretrain_seconds`, `pretrain_epochs`,
    `pretrain_masked_acc`, `train_seconds`, `train_epochs`,
    `train_masked_acc`, `total_train_seconds`, `translate_seconds`,
    `encoder_unchanged`, `train_history` (per-epoch logs of the translator),
    `examples` (source, prediction, expected), `errors` (the same, for every
    wrong held-out translation) and
    `heatmap` (the PNG path, or None without `--out`).
    """
    parser = argparse.ArgumentParser(
        prog="python -m examples.seq2seq_dates",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny run, no accuracy target"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        help="translator epochs (default 20; --quick: 2); the autoencoder "
        "trains its own fixed epochs (3; --quick: 1)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        help="train for a time budget (both phases) instead of a fixed "
        "number of epochs: the result then depends on the machine",
    )
    parser.add_argument("--out", help="folder for attention.png")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="what --seconds and the printed times count: wall time "
        "(default) or this process' "
        "CPU time (fair on a shared machine)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: faster for this small "
        "model on a shared 2-core CPU; 0 keeps torch's default; no effect "
        "on TensorFlow and JAX)",
    )
    parser.add_argument(
        "--dtype-policy",
        default=None,
        help="Keras dtype policy for the run, e.g. mixed_bfloat16 or "
        "mixed_float16 (default: the current global policy, float32)",
    )
    args = parser.parse_args(argv)
    if args.threads > 0 and keras.backend.backend() == "torch":
        # Small models on a busy CPU lose most of their time to torch's
        # intra-op threads spinning while they wait for a core (TensorFlow
        # and JAX fix their pools at start-up).
        import torch

        torch.set_num_threads(args.threads)
    settings = dict(QUICK if args.quick else FULL)
    if args.seconds is not None:
        settings["seconds"] = args.seconds
        # A budget stops training; the epochs only bound it.
        settings["epochs"] = 10_000
    if args.epochs is not None:
        settings["epochs"] = args.epochs
    return run(
        **settings,
        out=args.out,
        seed=args.seed,
        clock=args.clock,
        dtype_policy=args.dtype_policy,
    )


if __name__ == "__main__":
    main()
