"""Exports a model fed by `KeyIndex` rows as a SavedModel taking raw keys."""

import json
import os
import tempfile

import keras
import numpy as np

from kmodels.backend.keras_internals import inbound_nodes
from kmodels.backend.keras_internals import sublayers
from kmodels.export.keyed_saved_model import KEYS_FILE
from kmodels.export.keyed_saved_model import MODEL_FILE
from kmodels.export.keyed_saved_model import delta_argument_names
from kmodels.export.keyed_saved_model import export_keyed
from kmodels.export.keyed_saved_model import model_inputs
from kmodels.growable.delta import TableDelta
from kmodels.growable.embedding import GrowableEmbedding
from kmodels.growable.key_index import KeyIndex
from kmodels.growable.key_table import key_table
from kmodels.saving.atomic import SAVED_MODEL
from kmodels.saving.atomic import check_replaceable
from kmodels.saving.atomic import write_atomically


def export_with_keys(model, path, key_indexes=None):
    """Writes a TensorFlow SavedModel of `model` that takes raw keys.

    Each keyed input of the model (int32/int64 rows of a table, as
    `KeyIndex.lookup` gives them) becomes an input of raw keys: a string
    or int64 tensor of the same shape, mapped to rows inside the
    SavedModel by a hash table holding the index's keys now, as
    `KeyIndex.lookup_layer()` does (frozen semantics: unknown keys get the
    index's `oov_row`); `apply_delta` updates it. Other inputs are served
    as they are. The SavedModel's `serving_default` signature takes one
    keyword argument per input (named by the model's input dict keys, or
    its input names) and returns the model's outputs (a single output as
    `"output_0"`); `tf.saved_model.load(path).serve(*inputs)` takes them
    positionally, in `keras.tree.flatten(model.input)` order. Its
    `apply_delta`
    signature takes the deltas of the model's `GrowableEmbedding` tables
    (`table.delta(since=mark)`, laid out by `delta_inputs`): the served
    tables take new rows and keys without a new export.

    Only TensorFlow writes SavedModels: the model is saved as a `.keras`
    file with the indexes' state and exported from it (on the TensorFlow
    backend in this process; on JAX and torch by a TensorFlow worker
    process, kept for the next exports), so a model trained with JAX or torch
    exports the same way (TensorFlow must be installed). The SavedModel
    is written beside `path` and swapped in, all or nothing.

    As `TextTranslator.export`, it never deletes what it did not write:
    `path` may be new, empty, or a previous export holding only what an
    export writes (`saved_model.pb`, `fingerprint.pb`, `variables/`, an
    empty `assets/`); any other entry in it is refused, named in the
    error (see `docs/export.md`).

    Args:
        model: a functional `keras.Model`.
        path: str or path-like, the SavedModel folder: new, empty, or a
            previous export (replaced).
        key_indexes: optional dict `{input name: KeyIndex}`. By default
            each model input fed straight into a layer with an attached
            `key_index` (a `GrowableEmbedding(..., key_index=...)`) is
            keyed by that index.

    Returns:
        The dict `{input name: KeyIndex}` of the keyed inputs.

    Raises:
        ValueError: no keyed input, an unknown input name, an index
            without `oov_row` or holding no keys, or `path` is a file or a
            folder holding other entries than a SavedModel export. Nothing
            is written.
        RuntimeError: the export failed (its error output
            ends the message, naming `path`, never the hidden working
            folder).

    Example:

    ```python
    model = kmodels.models.recommender()
    # ... train, rows from model.get_layer("users").key_index.lookup(...)
    kmodels.models.export_with_keys(model, "served")
    served = tf.saved_model.load("served")
    served.signatures["serving_default"](
        user=tf.constant([10**12], tf.int64),
        item=tf.constant([7 * 10**12], tf.int64),
    )["output_0"]
    ```
    """
    inputs = dict(model_inputs(model))
    if key_indexes is None:
        key_indexes = _attached_indexes(model, inputs)
        if not key_indexes:
            raise ValueError(
                f"export_with_keys: no input of model '{model.name}' feeds a "
                "layer with an attached `key_index`; pass `key_indexes="
                "{input name: KeyIndex}`."
            )
    if not isinstance(key_indexes, dict) or not key_indexes:
        raise TypeError(
            "export_with_keys: `key_indexes` must be a non-empty dict "
            f"{{input name: KeyIndex}}; got {key_indexes!r}."
        )
    for name, index in key_indexes.items():
        if name not in inputs:
            raise ValueError(
                f"export_with_keys: `key_indexes` names input {name!r}; "
                f"model '{model.name}' has inputs {sorted(inputs)}."
            )
        if not isinstance(index, KeyIndex):
            raise TypeError(
                f"export_with_keys: `key_indexes[{name!r}]` must be a "
                f"kmodels.layers.KeyIndex; got {type(index).__name__}."
            )
        if index.oov_row is None:
            key_table(index)  # Raises the ValueError that explains it.
        if not len(index):
            # A TensorFlow table cannot be exported empty ("keys and values
            # cannot be empty tensors", deep in the subprocess).
            layers = [
                layer.name
                for layer in model.layers
                if getattr(layer, "key_index", None) is index
            ]
            where = f" (of layer {layers[0]!r})" if layers else ""
            raise ValueError(
                f"export_with_keys: KeyIndex '{index.name}'{where}, for "
                f"input {name!r}, holds no keys; a served model needs keys "
                "to look up. Fill it first: train on its rows "
                "(`index.lookup(keys)`) or `table.assign(keys, vectors)`."
            )
    path = os.fspath(path)
    check_replaceable(path, SAVED_MODEL, "export_with_keys")
    with tempfile.TemporaryDirectory() as folder:
        model.save(os.path.join(folder, MODEL_FILE))
        keyed = {}
        for i, (name, index) in enumerate(key_indexes.items()):
            store = {}
            index.save_own_variables(store)
            state = f"key_index_{i}.npz"
            np.savez(os.path.join(folder, state), **store)
            keyed[name] = {
                "index": keras.saving.serialize_keras_object(index),
                "state": state,
            }
        tables = _keyed_tables(model, key_indexes)
        with open(os.path.join(folder, KEYS_FILE), "w") as f:
            json.dump({"keyed": keyed, "tables": tables}, f)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_atomically(
            path,
            lambda staged: export_keyed(folder, staged),
            SAVED_MODEL,
            "export_with_keys",
        )
    return dict(key_indexes)


def _attached_indexes(model, inputs):
    """`{input name: KeyIndex}` of the inputs that feed a layer with an
    attached `key_index` directly."""
    names = {id(tensor): name for name, tensor in inputs.items()}
    found = {}
    for layer in model.layers:
        index = getattr(layer, "key_index", None)
        if not isinstance(index, KeyIndex):
            continue
        for node in inbound_nodes(layer):
            # The ids: the first call argument (a tensor, or a list of
            # features sharing the table), not `weights`.
            for tensor in keras.tree.flatten(node.arguments.args[:1]):
                if id(tensor) in names:
                    found[names[id(tensor)]] = index
    return found


def delta_inputs(model, deltas, key_indexes=None):
    """The arguments of the `apply_delta` signature of `model`'s keyed
    SavedModel (`export_with_keys`) for `deltas`, as NumPy arrays.

    The signature takes, for each `GrowableEmbedding` of the model (named
    `<layer>` with characters other than letters, digits and `_` as `_`):
    `<layer>_rows` (int64), `<layer>_values` (`(rows, output_dim)`),
    `<layer>_capacity` (int64 scalar) and, for a table whose `key_index`
    keys an input, `<layer>_keys`, `<layer>_key_rows` and
    `<layer>_evicted` (int64, or UTF-8 `bytes` objects for string keys:
    `tf.constant(array, tf.string)`). A table without a delta gets empty
    arrays (and its current capacity). Apply the deltas of successive
    marks in order.

    Args:
        model: the model exported.
        deltas: list of `TableDelta` (at most one per table), or a dict
            `{layer name: TableDelta}`.
        key_indexes: the `key_indexes` given to `export_with_keys`, if any.

    Returns:
        A dict `{argument name: NumPy array}`.

    Raises:
        ValueError: a delta of a table the model does not have, two
            deltas of one table, or values of another width.

    Example:

    ```python
    mark = users.mark()
    export_with_keys(model, "served")
    # ... train ...
    arguments = delta_inputs(model, [users.delta(since=mark)])
    served = tf.saved_model.load("served")
    apply = served.signatures["apply_delta"]
    specs = apply.structured_input_signature[1]
    apply(**{k: tf.constant(v, specs[k].dtype) for k, v in arguments.items()})
    ```
    """
    if isinstance(deltas, dict):
        deltas = list(deltas.values())
    deltas = list(deltas)
    layers = {
        layer.name: layer
        for layer in sublayers(model)
        if isinstance(layer, GrowableEmbedding)
    }
    by_name = {}
    for change in deltas:
        if not isinstance(change, TableDelta):
            raise TypeError(
                "delta_inputs expects TableDelta objects (table.delta("
                f"since=mark)); got {type(change).__name__}."
            )
        if change.table not in layers:
            raise ValueError(
                f"delta_inputs: a delta of table {change.table!r}; model "
                f"'{model.name}' has the GrowableEmbedding tables "
                f"{sorted(layers)}."
            )
        if change.table in by_name:
            raise ValueError(
                f"delta_inputs: two deltas of table {change.table!r}; "
                "apply them one call at a time, in order."
            )
        by_name[change.table] = change
    if key_indexes is None:
        key_indexes = _attached_indexes(model, dict(model_inputs(model)))
    keyed = _keyed_tables(model, key_indexes)
    arguments = {}
    for name, layer in layers.items():
        change = by_name.get(name)
        index = layer.key_index if name in keyed else None
        names = delta_argument_names(name, index is not None)
        dim = layer.output_dim
        if change is None:
            rows = np.zeros(0, np.int64)
            values = np.zeros((0, dim), np.float32)
            capacity = layer.capacity
            added, key_rows, evicted = [], np.zeros(0, np.int64), []
        else:
            rows, values, capacity = change.rows, change.values, change.capacity
            added, key_rows = change.keys_added, change.key_rows
            evicted = change.keys_evicted
            if values.shape != (len(rows), dim):
                raise ValueError(
                    f"delta_inputs: the delta of table {name!r} has values "
                    f"of shape {values.shape}; the table takes "
                    f"(rows={len(rows)}, output_dim={dim})."
                )
        given = [
            np.asarray(rows, np.int64),
            np.asarray(values, layer.embeddings.dtype),
            np.asarray(capacity, np.int64),
        ]
        if index is not None:
            given += [
                _key_array(added, index.key_dtype),
                np.asarray(key_rows, np.int64),
                _key_array(evicted, index.key_dtype),
            ]
        arguments.update(zip(names, given))
    return arguments


def _key_array(keys, key_dtype):
    """Keys as a 1-D NumPy array: int64, or UTF-8 `bytes` objects (what
    `tf.constant(array, tf.string)` takes)."""
    if key_dtype == "string":
        encoded = [key.encode("utf-8") for key in keys]
        array = np.empty(len(encoded), object)
        array[:] = encoded
        return array
    return np.array(keys, np.int64).reshape(-1)


def _keyed_tables(model, key_indexes):
    """`{layer name: [input names]}`: for each `GrowableEmbedding` of
    `model` whose `key_index` is one of `key_indexes`, the inputs it keys."""
    tables = {}
    for layer in sublayers(model):
        if not isinstance(layer, GrowableEmbedding):
            continue
        names = [
            name
            for name, index in key_indexes.items()
            if index is layer.key_index
        ]
        if names:
            tables[layer.name] = names
    return tables
