"""Raw keys in, model outputs out: a TensorFlow SavedModel of a model fed by
`KeyIndex` rows, with the index lookups inside.

Each keyed input is looked up in a TensorFlow mutable hash table
(`tf.lookup.experimental.MutableHashTable`) that holds, at export, the
index's keys and their rows (what `KeyIndex.lookup_layer()` maps), unknown
keys going to its `oov_row`. The SavedModel's second signature,
`apply_delta`, takes the deltas of the model's `GrowableEmbedding` tables
(`GrowableEmbedding.delta`, as `kmodels.models.delta_inputs` lays them
out): it grows a table variable (its first dimension is dynamic) to the
delta's capacity, writes the changed rows, and removes the evicted keys
from, then inserts the added keys into, the hash tables of the inputs
keyed by that table's index.

Only TensorFlow writes a SavedModel, so off the TensorFlow backend
`export_keyed(folder, export_path)` runs in a subprocess with
`KERAS_BACKEND=tensorflow` (on TensorFlow, `_main` runs in the caller's
process), as `saved_model.export_bundle` does for translators:

    python -m kmodels.export.keyed_saved_model FOLDER EXPORT

loads `FOLDER/model.keras` (weights are portable across backends) and, for
each keyed input, the saved state of its `KeyIndex`
(`FOLDER/keys.json`: `{"keyed": {input name: {"index": serialized
index, "state": file}}, "tables": {layer name: [input names keyed by
its index]}}`, each state file an `.npz` of the index's weight-store
entries, checksums included), and writes the SavedModel.
Importing this module imports no TensorFlow; TensorFlow is imported where
a table is built or an export runs.
"""

import argparse
import json
import os
import re

import keras
import numpy as np

from kmodels.export.tensorflow_process import run_in_tensorflow
from kmodels.growable.key_table import key_table

MODEL_FILE = "model.keras"
KEYS_FILE = "keys.json"
ENDPOINT = "serve"
DELTA_SIGNATURE = "apply_delta"


def delta_argument_prefix(layer_name):
    """The prefix of a table's arguments in the `apply_delta` signature:
    its layer name with characters other than letters, digits and `_`
    replaced by `_`."""
    return re.sub(r"\W", "_", layer_name)


def delta_argument_names(layer_name, keyed):
    """The `apply_delta` arguments of one table, in signature order:
    `<prefix>_rows`, `_values`, `_capacity`, and for a table whose
    `key_index` keys an input `_keys`, `_key_rows`, `_evicted`."""
    prefix = delta_argument_prefix(layer_name)
    names = ["rows", "values", "capacity"]
    if keyed:
        names += ["keys", "key_rows", "evicted"]
    return [f"{prefix}_{name}" for name in names]


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
        name: _mutable_table(_load_index(folder, keyed))
        for name, keyed in saved["keyed"].items()
    }
    specs = []
    for name, tensor in zip(names, tensors):
        dtype = tensor.dtype
        if name in tables:
            dtype = tables[name].key_dtype
        specs.append(tf.TensorSpec(tensor.shape, dtype, name=name))

    def serve(*features):
        inputs = []
        for name, tensor, x in zip(names, tensors, features):
            if name in tables:
                with tf.device("CPU:0"):
                    rows = tables[name].lookup(x)
                # A mutable table's lookup has no static shape.
                rows.set_shape(x.shape)
                x = tf.cast(rows, tensor.dtype)
            inputs.append(x)
        if isinstance(model.input, dict):
            inputs = dict(zip(names, inputs))
        return model(inputs, training=False)

    module = tf.Module()
    module.model_variables = [v.value for v in model.variables]
    module.tables = list(tables.values())
    module.serve = tf.function(serve, input_signature=specs)
    signatures = {"serving_default": module.serve.get_concrete_function()}
    apply_delta = _delta_function(model, tables, saved.get("tables", {}))
    if apply_delta is not None:
        module.apply_delta = apply_delta
        signatures[DELTA_SIGNATURE] = apply_delta.get_concrete_function()
    tf.saved_model.save(module, export_path, signatures=signatures)


def _mutable_table(index):
    """A `tf.lookup.experimental.MutableHashTable` holding the keys of
    `index` and their rows, unknown keys going to its `oov_row`."""
    import tensorflow as tf

    key_table(index)  # The checks (an `oov_row`) of a static table.
    dtype = tf.string if index.key_dtype == "string" else tf.int64
    table = tf.lookup.experimental.MutableHashTable(
        dtype, tf.int64, default_value=np.int64(index.oov_row)
    )
    # The key -> row map itself: right whatever rows the keys hold.
    with index._index_lock:
        keys, rows = list(index._rows), list(index._rows.values())
    if keys:
        table.insert(
            tf.constant(keys, dtype, shape=[len(keys)]),
            tf.constant(rows, tf.int64, shape=[len(rows)]),
        )
    return table


def _delta_function(model, tables, keyed_tables):
    """The `apply_delta` `tf.function` of the model's `GrowableEmbedding`
    tables, or `None` when it has none."""
    import tensorflow as tf

    from kmodels.backend.keras_internals import sublayers
    from kmodels.growable.embedding import GrowableEmbedding

    plan = []
    specs = []
    for layer in sublayers(model):
        if not isinstance(layer, GrowableEmbedding):
            continue
        inputs = [tables[name] for name in keyed_tables.get(layer.name, [])]
        names = delta_argument_names(layer.name, bool(inputs))
        variable = layer.embeddings.value
        shapes = [[None], [None, layer.output_dim], []]
        dtypes = [tf.int64, variable.dtype, tf.int64]
        if inputs:
            key_dtype = inputs[0].key_dtype
            shapes += [[None], [None], [None]]
            dtypes += [key_dtype, tf.int64, key_dtype]
        specs += [
            tf.TensorSpec(shape, dtype, name=name)
            for shape, dtype, name in zip(shapes, dtypes, names)
        ]
        plan.append((layer.name, variable, inputs, len(names)))
    if not plan:
        return None

    def apply_delta(*arguments):
        capacities = {}
        start = 0
        for name, variable, inputs, count in plan:
            given = arguments[start : start + count]
            start += count
            capacities[f"{delta_argument_prefix(name)}_capacity"] = (
                _apply_table_delta(name, variable, inputs, *given)
            )
        return capacities

    return tf.function(apply_delta, input_signature=specs)


def _apply_table_delta(name, variable, inputs, rows, values, capacity, *keys):
    """Applies one table's delta inside `apply_delta`: grows `variable` to
    `capacity` rows (new rows zero), writes `values` into `rows`, and moves
    the keys in the hash tables `inputs`. Returns the capacity now."""
    import tensorflow as tf

    held = tf.shape(variable, out_type=tf.int64)[0]

    def grow():
        dim = tf.shape(variable, out_type=tf.int64)[1:]
        pad = tf.zeros(tf.concat([[capacity - held], dim], 0), variable.dtype)
        variable.assign(tf.concat([variable, pad], 0))
        return tf.constant(True)

    tf.cond(capacity > held, grow, lambda: tf.constant(False))
    held = tf.shape(variable, out_type=tf.int64)[0]
    checks = [
        tf.debugging.assert_non_negative(
            rows, message=f"apply_delta: table {name} got a negative row"
        ),
        tf.debugging.assert_less(
            rows,
            held,
            message=(
                f"apply_delta: table {name} got a row at or past its "
                "capacity (pass the capacity of the delta; apply deltas in "
                "order)"
            ),
        ),
    ]
    with tf.control_dependencies(checks):
        variable.scatter_nd_update(rows[:, None], values)
    if keys:
        added, key_rows, evicted = keys
        with tf.device("CPU:0"):
            for table in inputs:
                table.remove(evicted)
                table.insert(added, key_rows)
    return held


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
