"""Raw keys in, model outputs out: a TensorFlow SavedModel of a model fed by
`KeyIndex` rows, with the index lookups inside.

Each keyed input is looked up in the `KeyTable` of its index
(`kmodels.growable.key_table`, what `KeyIndex.lookup_layer()` builds): a
TensorFlow static hash table from the index's keys to their rows, unknown
keys to its `oov_row`.

Only TensorFlow writes a SavedModel, so `export_keyed(folder, export_path)`
runs in a subprocess with `KERAS_BACKEND=tensorflow`, whatever the caller's
backend (as `saved_model.export_bundle` does for translators):

    python -m kmodels.export.keyed_saved_model FOLDER EXPORT

loads `FOLDER/model.keras` (weights are portable across backends) and, for
each keyed input, the saved state of its `KeyIndex`
(`FOLDER/keys.json`: `{"keyed": {input name: {"index": serialized
index, "state": file}}}`, each state file an `.npz` of the index's
weight-store entries, checksums included), and writes the SavedModel.
Importing this module imports no TensorFlow; TensorFlow is imported where
a table is built or an export runs.
"""

import argparse
import json
import os

import keras
import numpy as np

from kmodels.export.tensorflow_process import run_in_tensorflow
from kmodels.growable.key_table import key_table

MODEL_FILE = "model.keras"
KEYS_FILE = "keys.json"
ENDPOINT = "serve"


def model_inputs(model):
    """`[(name, KerasTensor)]` of a functional model's inputs, in the order
    `keras.tree.flatten(model.input)` gives them: named by their keys when
    the model takes a dict, by the tensors' names otherwise."""
    struct = model.input
    tensors = keras.tree.flatten(struct)
    if isinstance(struct, dict):
        by_id = {id(t): k for k, t in struct.items()}
        return [(by_id[id(t)], t) for t in tensors]
    return [(t.name, t) for t in tensors]


def export_keyed(folder, export_path):
    """Writes the SavedModel of the model and key indexes saved in
    `folder` to `export_path`, from a TensorFlow subprocess.

    Raises:
        RuntimeError: the subprocess failed; the message ends with its
            error output.
    """
    run_in_tensorflow(
        "kmodels.export.keyed_saved_model",
        [os.fspath(folder), os.fspath(export_path)],
        "the keyed model",
    )


def _load_index(folder, saved):
    """A `KeyIndex` from its serialized config and its saved state."""
    index = keras.saving.deserialize_keras_object(saved["index"])
    with np.load(os.path.join(folder, saved["state"])) as state:
        index.load_own_variables({k: state[k] for k in state.files})
    return index


def _export(folder, export_path):
    import tensorflow as tf

    import kmodels  # noqa: F401 (registers KeyIndex and the layers)

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "The keyed SavedModel exporter runs with "
            f"KERAS_BACKEND=tensorflow; got {keras.backend.backend()!r}."
        )
    with open(os.path.join(folder, KEYS_FILE)) as f:
        saved = json.load(f)
    model = keras.saving.load_model(
        os.path.join(folder, MODEL_FILE), compile=False
    )
    names, tensors = zip(*model_inputs(model))
    tables = {
        name: key_table(_load_index(folder, keyed))
        for name, keyed in saved["keyed"].items()
    }
    specs = []
    for name, tensor in zip(names, tensors):
        dtype = tensor.dtype
        if name in tables:
            dtype = tables[name].table.key_dtype
        specs.append(tf.TensorSpec(tensor.shape, dtype, name=name))

    def serve(*features):
        inputs = []
        for name, tensor, x in zip(names, tensors, features):
            if name in tables:
                x = tf.cast(tables[name].table.lookup(x), tensor.dtype)
            inputs.append(x)
        if isinstance(model.input, dict):
            inputs = dict(zip(names, inputs))
        return model(inputs, training=False)

    module = tf.Module()
    module.model_variables = [v.value for v in model.variables]
    module.tables = [table.table for table in tables.values()]
    module.serve = tf.function(serve, input_signature=specs)
    tf.saved_model.save(
        module,
        export_path,
        signatures={
            "serving_default": module.serve.get_concrete_function(),
        },
    )


def _main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m kmodels.export.keyed_saved_model",
        description="Exports a saved model and its key indexes as a "
        "TensorFlow SavedModel taking raw keys.",
    )
    parser.add_argument("folder", help="folder written by export_with_keys")
    parser.add_argument("export", help="SavedModel folder to write")
    args = parser.parse_args(argv)
    _export(args.folder, args.export)


if __name__ == "__main__":
    _main()
