"""kmodels: Keras 3 models that run the same on TensorFlow, JAX and PyTorch.

`import kmodels` registers every kmodels class that a `.keras` file can
name (layers, seq2seq models, losses) with Keras, so
`keras.saving.load_model` finds them without importing the subpackages
first. That imports Keras (and keras-hub) along with kmodels: set
`KERAS_BACKEND` before `import kmodels`. Without Keras installed, nothing is
registered and `python -m kmodels.testing.parity` runs with NumPy alone.
The other public subpackages load on first use:

    import kmodels
    kmodels.diagnostics.check_gradient_flow  # imports kmodels.diagnostics
"""

import importlib
import importlib.util

__version__ = "0.1.0"

# The Keras backends kmodels supports and tests, declared once.
BACKENDS = ("tensorflow", "jax", "torch")

# The public subpackages. `kmodels.backend` (the per-backend code) is
# internal; `kmodels.testing` is the test bench, imported by name.
_SUBPACKAGES = (
    "callbacks",
    "contracts",
    "datasets",
    "diagnostics",
    "distributed",
    "export",
    "growable",
    "layers",
    "models",
    "saving",
    "seq2seq",
)

__all__ = ["BACKENDS", *_SUBPACKAGES]

# The subpackages whose modules define `register_keras_serializable`
# classes or functions: importing them registers those with Keras.
_SERIALIZABLE_SUBPACKAGES = ("growable", "layers", "models", "seq2seq")


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"kmodels.{name}")
    raise AttributeError(f"module 'kmodels' has no attribute {name!r}")


def _register_serializables():
    # Keras' deserialisation never imports a module it does not know, so a
    # `.keras` file can only name classes already registered in the process.
    if importlib.util.find_spec("keras") is None:
        return
    for name in _SERIALIZABLE_SUBPACKAGES:
        importlib.import_module(f"kmodels.{name}")
    # JAX keeps what it compiled for the next process (off switch:
    # KMODELS_COMPILATION_CACHE=0; docs/backends.md, Compilation).
    importlib.import_module("kmodels.backend.compile_cache").enable()


_register_serializables()
