"""Keras callbacks of kmodels, one per file, each named after its class.

- `EmbeddingGrowth`: grows `GrowableEmbedding` tables inside `model.fit`.
- `GradientFlowCheck`: stops training when a weight gets no gradient.
- `InputContracts`: checks every batch of `fit` / `evaluate` / `predict`
  against the input contracts of the model's kmodels layers.
"""

from kmodels.callbacks.gradient_flow_check import GradientFlowCheck
from kmodels.callbacks.input_contracts import InputContracts
from kmodels.growable.callback import EmbeddingGrowth

__all__ = [
    "EmbeddingGrowth",
    "GradientFlowCheck",
    "InputContracts",
]
