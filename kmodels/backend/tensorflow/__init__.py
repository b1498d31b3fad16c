"""The TensorFlow implementation of the `kmodels.backend` interface."""

from kmodels.backend.tensorflow import compiled
from kmodels.backend.tensorflow import contracts
from kmodels.backend.tensorflow import gradients
from kmodels.backend.tensorflow import growth
from kmodels.backend.tensorflow import losses
from kmodels.backend.tensorflow import replicas
from kmodels.backend.tensorflow import rnn
from kmodels.backend.tensorflow import steps
from kmodels.backend.tensorflow import virtual_devices
