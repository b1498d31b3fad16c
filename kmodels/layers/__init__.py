"""Keras layers of kmodels (each a plain `keras.layers.Layer`)."""
from kmodels.layers.patch_embedding import PatchEmbedding
from kmodels.layers.positional_embedding import PositionalEmbedding
