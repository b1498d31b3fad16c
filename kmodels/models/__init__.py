"""Model builders of kmodels (functional `keras.Model`s)."""

from kmodels.models.recommender import hit_rate_at_k
from kmodels.models.recommender import recommender
from kmodels.models.transformer_encoder import transformer_encoder

__all__ = [
    "hit_rate_at_k",
    "recommender",
    "transformer_encoder",
]
