"""Handwritten digits, 8x8, read from the copy that ships in scikit-learn's
wheel (the UCI "Optical Recognition of Handwritten Digits" test set:
1,797 images, values 0-16).

Small enough for a Vision Transformer of a few thousand weights to train
in seconds on a CPU, and real: the images a `PatchEmbedding` model meets
are not random. kmodels ships none of it:

```
pip install scikit-learn
```

```python
from kmodels.datasets import digits

(x_train, y_train), (x_test, y_test) = digits.load_data()
x_train.shape, x_train.dtype        # ((1437, 8, 8), dtype('uint8'))
```
"""

import gzip

import numpy as np

from kmodels.datasets.packaged import check_test_fraction
from kmodels.datasets.packaged import package_file

INSTALL = "pip install scikit-learn"


def load_images():
    """All 1,797 images with their labels, in the file's order.

    Returns:
        `(images, labels)`: uint8 arrays of shape `(1797, 8, 8)` (values
        0-16) and `(1797,)` (0-9).

    Raises:
        ModuleNotFoundError: scikit-learn is not installed (the message
            gives the command above).
    """
    path = package_file(
        "sklearn", "datasets/data/digits.csv.gz", INSTALL, "The digits"
    )
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.uint8)
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1]


def load_data(test_fraction=0.2, seed=0):
    """The digits, split into train and test with the same share of each
    class on both sides (a seeded draw per class).

    Args:
        test_fraction: a float in (0, 1): the share of each class held out
            (rounded to whole images).
        seed: an int; the same seed gives the same split on every machine.

    Returns:
        `((x_train, y_train), (x_test, y_test))`, as `keras.datasets`
        loaders return them: images uint8 `(n, 8, 8)` (values 0-16; add a
        channel axis and scale for a model), labels uint8 `(n,)`. Each side
        keeps the file's order.
    """
    check_test_fraction(test_fraction)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"`seed` must be an int; received seed={seed!r}")
    images, labels = load_images()
    rng = np.random.default_rng(int(seed))
    test = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        held = int(round(test_fraction * len(members)))
        test[rng.choice(members, size=held, replace=False)] = True
    return (images[~test], labels[~test]), (images[test], labels[test])
