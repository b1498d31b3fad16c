"""The JAX implementation of the `kmodels.backend` interface."""

from kmodels.backend.jax import compile_cache
from kmodels.backend.jax import compiled
from kmodels.backend.jax import contracts
from kmodels.backend.jax import gradients
from kmodels.backend.jax import growth
from kmodels.backend.jax import losses
from kmodels.backend.jax import rnn
from kmodels.backend.jax import steps
from kmodels.backend.jax import virtual_devices
