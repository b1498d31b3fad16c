"""Growable embedding tables: one feature, one package.

- `GrowableEmbedding` (`embedding.py`): the table, a Keras layer that gains
  rows when new ids arrive and trains its rows with its own sparse
  optimizer.
- `KeyIndex` (`key_index.py`): raw keys (int64 or strings) to rows, with
  an optional bound and an eviction policy (`eviction.py`).
- `KeyTable` (`key_table.py`): a frozen index as a TensorFlow lookup table,
  for data pipelines and serving.
- `EmbeddingGrowth` (`callback.py`): grows the tables of a model inside
  `model.fit`, before each compiled step.
- `optimizers.py`: the sparse optimizers (what the rows' slots are and how a
  batch updates them); `saved_state.py`: the checksummed state the layers
  write to Keras weight stores.

What differs per backend (resizing a variable, the sparse update in the
backward pass) sits behind `kmodels.backend.growth`.
"""

from kmodels.growable.callback import EmbeddingGrowth
from kmodels.growable.embedding import GrowableEmbedding
from kmodels.growable.key_index import KeyIndex
from kmodels.growable.key_table import KeyTable

__all__ = [
    "EmbeddingGrowth",
    "GrowableEmbedding",
    "KeyIndex",
    "KeyTable",
]
