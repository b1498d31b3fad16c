"""TensorFlow SavedModels of kmodels models, written on any backend.

Only TensorFlow writes a SavedModel, so each exporter saves the model as a
`.keras` file (its weights are portable across backends) and runs
`python -m kmodels.export.<module>` with `KERAS_BACKEND=tensorflow`
(`run_in_tensorflow`), which loads it and writes the SavedModel:

- `saved_model`: a `TextTranslator` bundle, strings in and strings out
  (`export_bundle`; `TextTranslator.export` calls it). `tokenizer` and
  `detokenizer` build its two text ends in core TensorFlow ops.
- `keyed_saved_model`: a model fed by `KeyIndex` rows, raw keys in
  (`export_keyed`; `kmodels.models.export_with_keys` calls it).

The package may import TensorFlow, as `kmodels.backend` does, but never JAX
or torch; importing it imports no TensorFlow, only the functions that build
graphs and the export subprocesses do.

Layering (the import-linter contracts in `pyproject.toml`): `kmodels.export`
sits below the model packages that call it (`kmodels.seq2seq`,
`kmodels.models`) and above `kmodels.growable`, whose `KeyTable` it serves.
From seq2seq it imports only the text format's constants, from the two leaf
modules that define them (`kmodels.seq2seq.masking`: `PAD_ID`;
`kmodels.seq2seq.text_processor`: the other ids and `SUFFIX`), the layers
contract's declared exceptions; the translator itself is loaded from its
`.keras` file and driven by its public `Translator.generate_step`.
"""

import importlib

# The public names, loaded on first use. `kmodels.models` imports the keyed
# exporter before `kmodels.seq2seq` is imported; loading the translator
# exporter then would import `kmodels.seq2seq` (for its text constants),
# whose `text_translator` reads the exporter's file names while the exporter
# is half-imported.
_PUBLIC = {
    "detokenizer": "saved_model",
    "export_bundle": "saved_model",
    "export_keyed": "keyed_saved_model",
    "run_in_tensorflow": "tensorflow_process",
    "tokenizer": "saved_model",
}

__all__ = [
    "detokenizer",
    "export_bundle",
    "export_keyed",
    "run_in_tensorflow",
    "tokenizer",
]


def __getattr__(name):
    if name in _PUBLIC:
        module = importlib.import_module(f"kmodels.export.{_PUBLIC[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'kmodels.export' has no attribute {name!r}")
