"""The test bench of kmodels, for its own tests and for contributors' layers.

Not imported by the library. Submodules (import them by name):

- `kmodels.testing.oracle`: an independent NumPy (float64) reference of
  every building block, written from the published equations.
- `kmodels.testing.parity`: `ParityStore` records named outputs per backend;
  `python -m kmodels.testing.parity DIR` compares them across backends
  (NumPy only).
- `kmodels.testing.gradients`: `loss_gradients(model, loss_fn)`, gradients
  of a closure on the active backend, `None` unified to zeros.
- `kmodels.testing.layer_contract`: `run_layer_test`, the contract every
  kmodels layer test starts from.
- `kmodels.testing.table_states`: `TableStates`, a callback keeping a
  `GrowableEmbedding`'s table and slots after each train batch.
- `kmodels.testing.row_sum`: the row-sum model of a keyed
  `GrowableEmbedding` and its NumPy SGD oracle.
- `kmodels.testing.exports`: `assert_only_a_saved_model`, `tiny_bundle`,
  shared by the save and export tests.
- `kmodels.testing.tensorflow_probe`: a stand-in export module for the
  tests of the TensorFlow worker (`kmodels.export.tensorflow_process`).

This package's `__init__` imports nothing, so that the parity comparison
runs without Keras.
"""

__all__ = [
    "exports",
    "gradients",
    "layer_contract",
    "oracle",
    "parity",
    "row_sum",
    "table_states",
    "tensorflow_probe",
]
