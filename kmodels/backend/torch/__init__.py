"""The torch implementation of the `kmodels.backend` interface."""

from kmodels.backend.torch import compiled
from kmodels.backend.torch import contracts
from kmodels.backend.torch import decoding
from kmodels.backend.torch import gradients
from kmodels.backend.torch import growth
from kmodels.backend.torch import losses
from kmodels.backend.torch import optimizers
from kmodels.backend.torch import rnn
from kmodels.backend.torch import steps
from kmodels.backend.torch import table_replicas
from kmodels.backend.torch import threads
