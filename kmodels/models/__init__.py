"""Model builders of kmodels (functional `keras.Model`s)."""

from kmodels.models.recommender import recommender
from kmodels.models.transformer_encoder import transformer_encoder

__all__ = [
    "recommender",
    "transformer_encoder",
]
