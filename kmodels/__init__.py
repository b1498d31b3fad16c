"""kmodels: Keras 3 models that run the same on TensorFlow, JAX and PyTorch.

Subpackages load on first use, so `import kmodels` stays cheap and
`python -m kmodels.parity` runs with NumPy alone:

    import kmodels
    kmodels.layers.GrowableEmbedding  # imports kmodels.layers (and Keras)
"""

import importlib

__version__ = "0.1.0"

_SUBPACKAGES = (
    "backend",
    "diagnostics",
    "distributed",
    "layers",
    "models",
    "oracle",
    "parity",
    "seq2seq",
)


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"kmodels.{name}")
    raise AttributeError(f"module 'kmodels' has no attribute {name!r}")
