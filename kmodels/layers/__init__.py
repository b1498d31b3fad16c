"""Keras layers of kmodels (each a plain `keras.layers.Layer`)."""

from kmodels.growable.embedding import GrowableEmbedding
from kmodels.growable.key_index import KeyIndex
from kmodels.layers.patch_embedding import PatchEmbedding
from kmodels.layers.positional_embedding import PositionalEmbedding

__all__ = [
    "GrowableEmbedding",
    "KeyIndex",
    "PatchEmbedding",
    "PositionalEmbedding",
]
