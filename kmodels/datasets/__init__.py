"""Data sets for kmodels' examples and tests, as `keras.datasets` ships its
loaders.

- `kmodels.datasets.dates`: dates written many ways, translated to ISO 8601
  (the seq2seq example's parallel corpus; generated, ships with kmodels).
- `kmodels.datasets.movielens`: MovieLens-100k ratings in time order, read
  from `recbole`'s wheel (`pip install --no-deps recbole==1.2.1`).
- `kmodels.datasets.ui_strings`: Django's English UI strings with their
  translations, read from Django's wheel (`pip install "django==5.2.*"`).
- `kmodels.datasets.digits`: scikit-learn's 8x8 handwritten digits
  (`pip install scikit-learn`).

The real-data modules import nothing of those packages: they read files
from the installed folders, and a missing package gets an error naming its
install command (`docs/datasets.md`).
"""

from kmodels.datasets import dates
from kmodels.datasets import digits
from kmodels.datasets import movielens
from kmodels.datasets import ui_strings

__all__ = ["dates", "digits", "movielens", "ui_strings"]
