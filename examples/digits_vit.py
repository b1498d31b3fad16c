"""A tiny Vision Transformer on real images: scikit-learn's 8x8 digits.

`PatchEmbedding(2, dynamic_image_size=True)` cuts each image into a 4x4
grid of 2x2 patches, `PositionalEmbedding` adds a learned position per
patch, two keras-hub `TransformerEncoder`s and mean pooling feed the
logits. The demo prints, on held-out digits (`kmodels.datasets.digits`,
a stratified split with a fixed seed):

- the accuracy at 8x8, against logistic regression on the raw pixels;
- the same model on the test digits upsampled to 16x16 (an 8x8 grid of
  patches: the learned 4x4 positions are resampled inside the call),
  without retraining, then after a short fine-tuning at 16x16;
- the gradient-flow check's verdict (`kmodels.diagnostics`).

Training runs a fixed number of epochs from fixed seeds, so the printed
figures are the same in every run on one backend.

Run: `python -m examples.digits_vit [--quick]` (needs scikit-learn:
`pip install scikit-learn`).
"""

import time

import keras
import keras_hub
import numpy as np

from examples.settings import parse
from kmodels.datasets import digits
from kmodels.diagnostics import check_gradient_flow
from kmodels.layers import PatchEmbedding
from kmodels.layers import PositionalEmbedding

FULL = dict(epochs=60, fine_tune_epochs=5, train_limit=None)
QUICK = dict(epochs=3, fine_tune_epochs=1, train_limit=256)


def images(x, scale=1):
    """uint8 digits (n, 8, 8), values 0-16 -> float32 (n, 8s, 8s, 1) in
    [0, 1], each pixel repeated `scale` times along both sides."""
    x = x.astype("float32")[..., None] / 16.0
    return np.repeat(np.repeat(x, scale, axis=1), scale, axis=2)


def vit(dim=32, layers=2, heads=2, intermediate_dim=64, seed=0):
    """The tiny ViT: any image size, positions learned on a 4x4 grid."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((None, None, 1), name="images")
    x = PositionalEmbedding(
        PatchEmbedding(2, dim, dynamic_image_size=True),
        sequence_length=16,
        name="positions",
    )(inputs)
    for i in range(layers):
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim, heads, name=f"encoder_{i}"
        )(x)
    x = keras.layers.GlobalAveragePooling1D(name="pooling")(x)
    model = keras.Model(inputs, keras.layers.Dense(10, name="logits")(x))
    model.compile(
        keras.optimizers.Adam(2e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def logistic_regression(x_train, y_train, x_test, y_test):
    """scikit-learn's logistic regression on the raw pixels: the baseline
    (the fit is deterministic)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(max_iter=5000)
    model.fit(x_train.reshape(len(x_train), -1) / 16.0, y_train)
    predicted = model.predict(x_test.reshape(len(x_test), -1) / 16.0)
    return float(np.mean(predicted == y_test))


def accuracy(model, x, y):
    # One batch: one compiled predict step per image size.
    logits = model.predict(x, batch_size=len(x), verbose=0)
    return float(np.mean(np.argmax(logits, axis=-1) == y))


def run(epochs, fine_tune_epochs, train_limit=None, seed=0):
    """Trains and scores the ViT; returns the printed figures as a dict.

    Args:
        epochs: epochs at 8x8.
        fine_tune_epochs: epochs at 16x16 after that.
        train_limit: train on the first this many training digits only
            (`None`: all 1,438).
        seed: the weights' and the shuffling's seed.
    """
    (x_train, y_train), (x_test, y_test) = digits.load_data(seed=0)
    if train_limit is not None:
        x_train, y_train = x_train[:train_limit], y_train[:train_limit]
    model = vit(seed=seed)
    check = check_gradient_flow(model, images(x_train[:32]), y_train[:32])
    model.fit(
        images(x_train),
        y_train,
        batch_size=64,
        epochs=epochs,
        shuffle=True,
        verbose=0,
    )
    figures = {
        "logistic_regression": logistic_regression(
            x_train, y_train, x_test, y_test
        ),
        "vit_8x8": accuracy(model, images(x_test), y_test),
        "vit_16x16": accuracy(model, images(x_test, 2), y_test),
    }
    model.fit(
        images(x_train, 2),
        y_train,
        batch_size=64,
        epochs=fine_tune_epochs,
        shuffle=True,
        verbose=0,
    )
    figures["vit_16x16_fine_tuned"] = accuracy(model, images(x_test, 2), y_test)
    figures["gradient_flow_ok"] = bool(check.ok)
    figures["trained_on"] = len(x_train)
    figures["test_digits"] = len(x_test)
    return figures


def main(argv=None):
    settings = parse(__doc__, argv, FULL, QUICK)
    start = time.perf_counter()
    figures = run(**settings)
    print(
        f"   digits ({figures['trained_on']} train, {figures['test_digits']} "
        f"test; {settings['epochs']} + {settings['fine_tune_epochs']} epochs)"
    )
    print(
        "   gradient flow: "
        + (
            "every weight gets a gradient"
            if figures["gradient_flow_ok"]
            else "FAILED"
        )
    )
    print(
        f"   accuracy  ViT 8x8 {figures['vit_8x8']:.3f}   logistic "
        f"regression {figures['logistic_regression']:.3f}"
    )
    print(
        f"   accuracy  ViT 16x16, positions resampled "
        f"{figures['vit_16x16']:.3f}, after "
        f"{settings['fine_tune_epochs']} fine-tuning epochs "
        f"{figures['vit_16x16_fine_tuned']:.3f}"
    )
    print(f"   ({time.perf_counter() - start:.0f} s)", flush=True)
    return figures


if __name__ == "__main__":
    main()
