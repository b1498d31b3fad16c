"""Model builders of kmodels (functional `keras.Model`s)."""

from kmodels.models.key_serving import delta_inputs
from kmodels.models.key_serving import export_with_keys
from kmodels.models.recommender import hit_rate_at_k
from kmodels.models.recommender import recommender
from kmodels.models.transformer_encoder import transformer_encoder

__all__ = [
    "delta_inputs",
    "export_with_keys",
    "hit_rate_at_k",
    "recommender",
    "transformer_encoder",
]
