"""Growable embedding tables: one feature, one package.

- `GrowableEmbedding` (`embedding.py`): the table, a Keras layer that gains
  rows when new ids arrive and trains its rows with its own sparse
  optimizer. Its parts: `initializer.py` (rows drawn from `(seed, row)`),
  `sizing.py` (the growth policy, the ids and rows it accepts), `bags.py`
  (features, bags and combiners), `lookup.py` (the lookup paths and the
  sparse update), `slots.py` (optimizer slots, following the model's
  optimizer), `embedding_state.py` (saving and loading).
- `SparseOptimizer`, `SparseSGD`, `SparseAdagrad`, `SparseAdam`
  (`optimizers.py`): the table's row-sparse optimizers, one class per rule
  (its hyperparameters, slots, update and config).
- `KeyIndex` (`key_index.py`): raw keys (int64 or strings) to rows, with
  an optional bound and an eviction policy; `key_batch.py` checks a batch
  of keys, `key_index_state.py` saves and loads the index's state.
- `EvictionPolicy`, `LRUEviction`, `LFUEviction` (`eviction.py`): which
  keys a full index evicts, one class per policy; `expiry.py`: which keys
  an index with a time-to-live (`ttl`, `ttl_seconds`) expires.
- `KeyTable` (`key_table.py`): a frozen index as a TensorFlow lookup table,
  for data pipelines and serving.
- `EmbeddingGrowth` (`callback.py`): grows the tables of a model inside
  `model.fit`, before each compiled step.
- `DeltaMark`, `TableDelta` (`delta.py`): `GrowableEmbedding.mark()` and
  `delta(since=mark)`, what changed since a mark; `warm_start.py`:
  `GrowableEmbedding.assign(keys, vectors)`, pretrained rows.
- `saved_state.py`: the checksums of the state the layers write to Keras
  weight stores.

What differs per backend (resizing a variable, the sparse update in the
backward pass) sits behind `kmodels.backend.growth`.
"""

from kmodels.growable.callback import EmbeddingGrowth
from kmodels.growable.delta import DeltaMark
from kmodels.growable.delta import TableDelta
from kmodels.growable.embedding import GrowableEmbedding
from kmodels.growable.eviction import EvictionPolicy
from kmodels.growable.eviction import LFUEviction
from kmodels.growable.eviction import LRUEviction
from kmodels.growable.key_index import KeyIndex
from kmodels.growable.key_table import KeyTable
from kmodels.growable.optimizers import SparseAdagrad
from kmodels.growable.optimizers import SparseAdam
from kmodels.growable.optimizers import SparseOptimizer
from kmodels.growable.optimizers import SparseSGD

__all__ = [
    "DeltaMark",
    "EmbeddingGrowth",
    "EvictionPolicy",
    "GrowableEmbedding",
    "KeyIndex",
    "KeyTable",
    "LFUEviction",
    "LRUEviction",
    "SparseAdagrad",
    "SparseAdam",
    "SparseOptimizer",
    "SparseSGD",
    "TableDelta",
]
