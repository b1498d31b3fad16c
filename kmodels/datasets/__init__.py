"""Data sets that ship with kmodels (generated, no download), as
`keras.datasets` ships its loaders.

- `kmodels.datasets.dates`: dates written many ways, translated to ISO 8601
  (the seq2seq example's parallel corpus).
"""

from kmodels.datasets import dates

__all__ = ["dates"]
