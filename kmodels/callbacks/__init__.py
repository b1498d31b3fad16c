"""Keras callbacks of kmodels, one per file, each named after its class.

- `EmbeddingGrowth`: grows `GrowableEmbedding` tables inside `model.fit`.
- `GradientFlowCheck`: stops training when a weight gets no gradient, or
  monitors gradients every N steps.
- `LookAheadLimit`: keeps a data generator at most N batches ahead of
  the train step (lookups in an evicting `KeyIndex` in training order).
- `InputContracts`: deprecated; `kmodels.contracts.enforce(model)` is the
  one way to turn a functional model's input checks on.
"""

from kmodels.callbacks.gradient_flow_check import GradientFlowCheck
from kmodels.callbacks.input_contracts import InputContracts
from kmodels.callbacks.look_ahead_limit import LookAheadLimit
from kmodels.callbacks.look_ahead_limit import LookAheadWarning
from kmodels.growable.callback import EmbeddingGrowth

__all__ = [
    "EmbeddingGrowth",
    "GradientFlowCheck",
    "InputContracts",
    "LookAheadLimit",
    "LookAheadWarning",
]
