"""The contract every kmodels layer test starts from: `run_layer_test`.

Written for kmodels' layers in the spirit of Keras' and keras-hub's own
`run_layer_test`, with `keras.ops`, NumPy and Keras' backend-neutral
`compute_output_spec` only (no TensorFlow, JAX or torch import), so it
runs the same on TensorFlow, JAX and torch. Every failed check raises an
`AssertionError` that names the layer class and what differed.

One job per module: `contract` (`run_layer_test`, the config and
declared-shape checks), `calls` (making, calling and reading the layer),
`precision`, `saving` and `training` (those checks).
"""

from kmodels.testing.layer_contract.contract import run_layer_test
from kmodels.testing.layer_contract.precision import PRECISION_POLICIES

__all__ = ["PRECISION_POLICIES", "run_layer_test"]
