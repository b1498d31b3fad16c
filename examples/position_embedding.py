"""A task that needs positions: does a sequence's first token equal its last?

Three Transformer encoders train on the same data and are scored on held-out
sequences:

- `correct`: `kmodels.layers.PositionalEmbedding` (token + learned position
  embeddings, summed), the right composition;
- `no positions`: the token embedding alone;
- `positions only (bug)`: the token embedding fed to
  `keras_hub.layers.PositionEmbedding`, whose output alone goes on (the
  wiring of the original question, see docs/position_embedding.md): the
  token embedding is disconnected.

Negative examples are permutations of positive ones (same tokens, first !=
last), so the multiset of tokens says nothing about the label: a model
without positions cannot beat chance, and neither can one whose output
ignores the tokens. The demo also runs `check_gradient_flow` on each model
and prints its verdict.

`--plot PATH` also trains the buggy model and the correct one with
`GradientFlowCheck(every_n_steps=...)` and writes their gradient norms per
layer, side by side, to a PNG (docs/gradient_flow.png).

Run: `python -m examples.position_embedding [--quick] [--plot PATH]`.
"""

import argparse
import time
import warnings

import keras
import keras_hub
import numpy as np

from kmodels.callbacks import GradientFlowCheck
from kmodels.diagnostics import GradientFlowError
from kmodels.diagnostics import check_gradient_flow
from kmodels.diagnostics import plot_gradient_history
from kmodels.models import transformer_encoder


def first_equals_last_data(num_examples, length, vocabulary_size, seed):
    """Balanced `(ids, labels)`; label 1 when `ids[:, 0] == ids[:, -1]`.

    Each negative is a permutation of a positive with `first != last`, so
    positives and negatives hold the same tokens.
    """
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocabulary_size, size=(num_examples, length))
    ids[:, -1] = ids[:, 0]
    labels = np.ones(num_examples, "int32")
    for i in range(1, num_examples, 2):
        row = ids[i]
        while len(set(row)) == 1:  # no permutation can separate the ends
            row = rng.integers(1, vocabulary_size, size=length)
            row[-1] = row[0]
        while row[0] == row[-1]:
            row = rng.permutation(row)
        ids[i] = row
        labels[i] = 0
    return ids.astype("int32"), labels


def _encoder_head(x, num_classes, intermediate_dim=32, num_heads=2, **_):
    """One Transformer encoder, mean pooling and logits: the part the
    demo's baseline models share."""
    x = keras_hub.layers.TransformerEncoder(
        intermediate_dim=intermediate_dim, num_heads=num_heads, name="encoder_0"
    )(x)
    x = keras.layers.GlobalAveragePooling1D(name="pooling")(x)
    return keras.layers.Dense(num_classes, name="logits")(x)


def positions_only_model(
    vocabulary_size, sequence_length, embedding_dim, num_classes=2, **kwargs
):
    """The buggy wiring `Embedding -> PositionEmbedding -> encoder`: only
    the position vectors go on, the token embeddings are dropped (kept to
    reproduce the bug)."""
    inputs = keras.Input((sequence_length,), dtype="int32")
    tokens = keras.layers.Embedding(
        vocabulary_size, embedding_dim, name="embedding"
    )(inputs)
    x = keras_hub.layers.PositionEmbedding(
        sequence_length, name="position_embedding"
    )(tokens)
    outputs = _encoder_head(x, num_classes, **kwargs)
    return keras.Model(inputs, outputs, name="positions_only")


def no_position_model(
    vocabulary_size, sequence_length, embedding_dim, num_classes=2, **kwargs
):
    """Token embedding only: permutation-invariant, blind to order."""
    inputs = keras.Input((sequence_length,), dtype="int32")
    x = keras.layers.Embedding(
        vocabulary_size, embedding_dim, name="embedding"
    )(inputs)
    outputs = _encoder_head(x, num_classes, **kwargs)
    return keras.Model(inputs, outputs, name="no_positions")


def correct_model(
    vocabulary_size, sequence_length, embedding_dim, num_classes=2, **kwargs
):
    return transformer_encoder(
        keras.layers.Embedding(vocabulary_size, embedding_dim),
        (sequence_length,),
        num_classes=num_classes,
        intermediate_dim=kwargs.get("intermediate_dim", 32),
        num_heads=kwargs.get("num_heads", 2),
        name="correct",
    )


def _verdict(model, x, y, loss):
    try:
        check_gradient_flow(model, x, y, loss=loss)
    except GradientFlowError as e:
        return str(e)
    return "passed"


def run(quick=False, seed=0, verbose=0):
    """Trains the three models; returns a list of result dicts."""
    if quick:
        length, vocabulary_size, dim = 4, 6, 16
        train_n, epochs = 1024, 12
    else:
        length, vocabulary_size, dim = 6, 9, 32
        train_n, epochs = 4096, 15
    sizes = dict(embedding_dim=dim, intermediate_dim=2 * dim, num_heads=2)
    x, y = first_equals_last_data(train_n, length, vocabulary_size, seed)
    x_test, y_test = first_equals_last_data(
        1024, length, vocabulary_size, seed + 1
    )
    builders = (
        ("correct", correct_model),
        ("no positions", no_position_model),
        ("positions only (bug)", positions_only_model),
    )
    results = []
    for name, build in builders:
        keras.utils.set_random_seed(seed)
        model = build(vocabulary_size, length, **sizes)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        verdict = _verdict(model, x[:16], y[:16], loss)
        model.compile(
            optimizer=keras.optimizers.Adam(3e-3 if not quick else 5e-3),
            loss=loss,
            metrics=["accuracy"],
        )
        start = time.perf_counter()
        model.fit(x, y, batch_size=32, epochs=epochs, verbose=verbose)
        seconds = time.perf_counter() - start
        _, accuracy = model.evaluate(x_test, y_test, verbose=0)
        results.append(
            dict(
                model=name,
                accuracy=float(accuracy),
                seconds=seconds,
                check=verdict,
            )
        )
    return results


def gradient_flow_plot(
    path,
    seed=0,
    epochs=3,
    every_n_steps=8,
    size=(800, 320),
    num_examples=1024,
):
    """Trains the buggy wiring and the correct one (the `--quick` sizes,
    `num_examples` sequences in batches of 32) with
    `GradientFlowCheck(every_n_steps=..., patience=3)`, writes each layer's
    gradient norm over the steps, side by side, to the PNG `path`, and
    returns `{model name: the check's flags}`."""
    length, vocabulary_size, dim = 4, 6, 16
    sizes = dict(embedding_dim=dim, intermediate_dim=2 * dim, num_heads=2)
    x, y = first_equals_last_data(num_examples, length, vocabulary_size, seed)
    monitors, flags = [], {}
    for name, build in (
        ("positions only (bug)", positions_only_model),
        ("correct", correct_model),
    ):
        keras.utils.set_random_seed(seed)
        model = build(vocabulary_size, length, **sizes)
        model.compile(
            optimizer=keras.optimizers.Adam(5e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        check = GradientFlowCheck(
            (x[:16], y[:16]), every_n_steps=every_n_steps, patience=3
        )
        with warnings.catch_warnings():
            # The flags are returned; the warning would repeat them.
            warnings.simplefilter("ignore")
            model.fit(
                x, y, batch_size=32, epochs=epochs, callbacks=[check], verbose=0
            )
        monitors.append(check.monitor)
        flags[name] = check.flags
    plot_gradient_history(monitors, path, titles=list(flags), size=size)
    return flags


def resampling_plot(path, new_grid=(7, 7), size=(720, 300)):
    """Writes to the PNG `path` one channel of a 4 x 4 grid of learned
    patch positions (a smooth pattern, set by hand) beside the same
    channel resampled by `PositionalEmbedding.resized(new_grid)` (bicubic),
    and returns the two tables `(16, 2)` and `(rows * cols, 2)`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from kmodels.layers import PatchEmbedding
    from kmodels.layers import PositionalEmbedding

    layer = PositionalEmbedding(PatchEmbedding(4, 2), sequence_length=16)
    layer.build((1, 16, 16, 3))
    rows, cols = np.meshgrid(np.arange(4.0), np.arange(4.0), indexing="ij")
    table = np.stack(
        [np.sin(1.3 * rows) + 0.5 * cols, np.cos(cols) * rows], axis=-1
    ).reshape(16, 2)
    layer.position_embedding.position_embeddings.assign(table)
    resized = layer.resized(new_grid)
    new = keras.ops.convert_to_numpy(
        resized.position_embedding.position_embeddings
    )
    width, height = size
    figure = Figure(figsize=(width / 100, height / 100), dpi=100)
    FigureCanvasAgg(figure)
    panels = (
        (table[:, 0].reshape(4, 4), "trained grid 4 x 4 (channel 0)"),
        (new[:, 0].reshape(new_grid), f"resized({new_grid}) (bicubic)"),
    )
    low, high = min(p.min() for p, _ in panels), max(p.max() for p, _ in panels)
    for i, (values, title) in enumerate(panels):
        axes = figure.add_subplot(1, 2, i + 1)
        image = axes.imshow(values, vmin=low, vmax=high, cmap="viridis")
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("patch column")
        axes.set_ylabel("patch row")
    figure.colorbar(image, ax=figure.axes, shrink=0.8)
    figure.savefig(path)
    return table, new


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smaller run (< 30 s)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plot", help="also write the gradient-flow plot to this PNG"
    )
    parser.add_argument(
        "--resample-plot",
        help="also write a learned position grid and its resized version "
        "to this PNG",
    )
    args = parser.parse_args(argv)
    if args.resample_plot:
        resampling_plot(args.resample_plot)
        print(f"wrote {args.resample_plot}")
    if args.plot:
        flags = gradient_flow_plot(args.plot, seed=args.seed)
        print(f"wrote {args.plot}")
        for name, found in flags.items():
            print(f"{name}: {len(found)} flag(s)")
            for flag in found:
                print(f"  {flag.message()}")
    results = run(quick=args.quick, seed=args.seed)
    print(
        f"first token == last token, backend {keras.backend.backend()}, "
        f"chance = 50%{' (--quick: small run)' if args.quick else ''}"
    )
    print(f"{'model':<20} {'held-out acc':>12} {'train s':>8}  gradient check")
    for r in results:
        check = "passed" if r["check"] == "passed" else "FAILED (below)"
        print(
            f"{r['model']:<20} {r['accuracy']:>12.1%} {r['seconds']:>8.1f}  "
            f"{check}"
        )
    for r in results:
        if r["check"] != "passed":
            print(f"\n{r['model']}: {r['check']}")
    return results


if __name__ == "__main__":
    main()
