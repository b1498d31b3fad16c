"""Keras layers of kmodels (each a plain `keras.layers.Layer`), and the
eviction policies of `KeyIndex`."""

from kmodels.growable.embedding import GrowableEmbedding
from kmodels.growable.eviction import EvictionPolicy
from kmodels.growable.eviction import LFUEviction
from kmodels.growable.eviction import LRUEviction
from kmodels.growable.key_index import KeyIndex
from kmodels.layers.patch_embedding import PatchEmbedding
from kmodels.layers.positional_embedding import PositionalEmbedding

__all__ = [
    "EvictionPolicy",
    "GrowableEmbedding",
    "KeyIndex",
    "LFUEviction",
    "LRUEviction",
    "PatchEmbedding",
    "PositionalEmbedding",
]
