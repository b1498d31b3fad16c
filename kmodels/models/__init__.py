"""Model builders of kmodels (functional `keras.Model`s)."""

from kmodels.models.transformer_encoder import transformer_encoder
