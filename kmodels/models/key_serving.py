"""Exports a model fed by `KeyIndex` rows as a SavedModel taking raw keys."""

import json
import os
import tempfile

import keras
import numpy as np

from kmodels.backend.keras_internals import inbound_nodes
from kmodels.export.keyed_saved_model import KEYS_FILE
from kmodels.export.keyed_saved_model import MODEL_FILE
from kmodels.export.keyed_saved_model import export_keyed
from kmodels.export.keyed_saved_model import model_inputs
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
    SavedModel by a static hash table holding the index's keys now, as
    `KeyIndex.lookup_layer()` does (frozen semantics: unknown keys get the
    index's `oov_row`). Other inputs are served as they are. The
    SavedModel's `serving_default` signature takes one keyword argument
    per input (named by the model's input dict keys, or its input names)
    and returns the model's outputs (a single output as `"output_0"`);
    `tf.saved_model.load(path).serve(*inputs)` takes them positionally,
    in `keras.tree.flatten(model.input)` order.

    Only TensorFlow writes SavedModels: the model is saved as a `.keras`
    file with the indexes' state and exported by a subprocess with
    `KERAS_BACKEND=tensorflow`, so a model trained with JAX or torch
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
            without `oov_row`, or `path` is a file or a folder holding
            other entries than a SavedModel export. Nothing is written.
        RuntimeError: the export subprocess failed (its error output
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
        with open(os.path.join(folder, KEYS_FILE), "w") as f:
            json.dump({"keyed": keyed}, f)
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
