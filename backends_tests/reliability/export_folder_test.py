"""Exports and folder saves delete nothing they did not write (#26).

`TextTranslator.export` into a previous export to which a user had added
`README.txt` succeeded and deleted it; `export_with_keys` wrote into any
folder, not atomically; `save_model(..., zipped=False)` replaced any folder
(a project folder included) with the model. A folder is now replaced only
when it is empty or holds a previous write and nothing else: files the user
added make the call refuse, naming them, and the folder stays as it was.

No test here runs TensorFlow: the exporters' subprocess step is replaced
by a function writing what `tf.saved_model.save` writes (TensorFlow 2.21:
`saved_model.pb`, `fingerprint.pb`, `variables/variables.index` and
`.data-00000-of-00001`, an empty `assets/`). The real exports of
`seq2seq/export_test.py` and `layers/key_serving_test.py` check that this is
what TensorFlow writes.
"""

import hashlib
import os
import re

import keras
import numpy as np
import pytest

from kmodels.export import saved_model
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.models import export_with_keys
from kmodels.models import key_serving
from kmodels.saving import save_model
from kmodels.testing.exports import tiny_bundle

SAVED_MODEL_FILES = (
    "saved_model.pb",
    "fingerprint.pb",
    "variables/variables.index",
    "variables/variables.data-00000-of-00001",
)
REFUSED = (
    "{what} replaces the whole folder {path!r}, which {holds}: {entries!r}. "
    "Move them out of the folder (replacing it would delete them) or choose "
    "a new or empty folder; {outcome}."
)


def _write_export(path, tag):
    """What `tf.saved_model.save` writes, with `tag` in every file (into
    an existing folder too, as TensorFlow does)."""
    os.makedirs(os.path.join(path, "variables"), exist_ok=True)
    os.makedirs(os.path.join(path, "assets"), exist_ok=True)
    for name in SAVED_MODEL_FILES:
        with open(os.path.join(path, name), "w") as f:
            f.write(f"{tag} {name}")


def _tree(path):
    """{relative path: sha256 of a file, or "folder"} of everything under
    `path` (empty folders included)."""
    tree = {}
    for folder, dirs, files in os.walk(path):
        for name in dirs:
            tree[os.path.relpath(os.path.join(folder, name), path)] = "folder"
        for name in files:
            file = os.path.join(folder, name)
            with open(file, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            tree[os.path.relpath(file, path)] = digest
    return tree


def _exported_tree(tag):
    return {
        "variables": "folder",
        "assets": "folder",
        **{
            name: hashlib.sha256(f"{tag} {name}".encode()).hexdigest()
            for name in SAVED_MODEL_FILES
        },
    }


def _bundle():
    return tiny_bundle(built=True)


def _keyed_model():
    index = KeyIndex("string")
    index.lookup(["a", "b"])
    ids = keras.Input(shape=(), dtype="int32", name="user")
    table = GrowableEmbedding(
        2, initial_capacity=4, key_index=index, name="users"
    )
    return keras.Model(ids, table(ids))


@pytest.fixture
def exporters(monkeypatch):
    """`{name: export(path)}` for both exporters, their TensorFlow step
    replaced by `_write_export(staged, "new")` (plus `exporters.during`,
    called while it writes); `exporters.calls` lists the paths written."""
    calls = []

    class Exporters(dict):
        during = None

    found = Exporters()

    def fake(staged):
        calls.append(staged)
        _write_export(staged, "new")
        if found.during:
            found.during(staged)

    monkeypatch.setattr(
        saved_model,
        "export_bundle",
        lambda bundle, staged, n, search: fake(staged),
    )
    monkeypatch.setattr(
        key_serving, "export_keyed", lambda folder, staged: fake(staged)
    )
    bundle, model = _bundle(), _keyed_model()
    found["TextTranslator.export"] = bundle.export
    found["export_with_keys"] = lambda path: export_with_keys(model, path)
    found.calls = calls
    return found


def _previous_export(tmp_path):
    path = str(tmp_path / "served")
    _write_export(path, "old")
    return path


def _add(path, entry):
    """Adds a user's `entry` (a file, or a folder with a trailing "/")."""
    full = os.path.join(path, entry)
    if entry.endswith("/"):
        os.makedirs(full)
        with open(os.path.join(full, "tf_serving_warmup_requests"), "w") as f:
            f.write("mine")
    else:
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write("mine")


@pytest.mark.parametrize("what", ["TextTranslator.export", "export_with_keys"])
@pytest.mark.parametrize(
    "entry",
    [
        "README.txt",
        "assets/notes.txt",
        "variables/variables.index.bak",
        # TF Serving's warm-up requests: a user's addition to an export.
        "assets.extra/",
    ],
)
def test_export_refuses_a_previous_export_holding_user_files(
    exporters, what, entry, tmp_path
):
    path = _previous_export(tmp_path)
    _add(path, entry)
    before = _tree(path)
    message = REFUSED.format(
        what=what,
        path=path,
        holds="holds other files than a SavedModel",
        entries=[entry],
        outcome="nothing was written",
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        exporters[what](path)
    # Refused before the TensorFlow step, the folder as it was.
    assert exporters.calls == []
    assert _tree(path) == before
    assert os.listdir(tmp_path) == ["served"]


@pytest.mark.parametrize("what", ["TextTranslator.export", "export_with_keys"])
def test_export_refuses_a_folder_that_is_no_previous_export(
    exporters, what, tmp_path
):
    # A user's folder, and one holding only part of an export (no
    # saved_model.pb): nothing in them was written by an export.
    for name, entries in (
        ("notes", ["notes.txt"]),
        ("partial", ["variables/variables.index"]),
    ):
        path = str(tmp_path / name)
        for entry in entries:
            _add(path, entry)
        before = _tree(path)
        message = REFUSED.format(
            what=what,
            path=path,
            holds="is not a SavedModel (it has no saved_model.pb)",
            entries=[entries[0].split("/")[0] + "/"]
            if "/" in entries[0]
            else entries,
            outcome="nothing was written",
        )
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            exporters[what](path)
        assert _tree(path) == before
    assert exporters.calls == []
    assert sorted(os.listdir(tmp_path)) == ["notes", "partial"]


@pytest.mark.parametrize("what", ["TextTranslator.export", "export_with_keys"])
def test_export_replaces_a_previous_export(exporters, what, tmp_path):
    path = _previous_export(tmp_path)
    exporters[what](path)
    assert _tree(path) == _exported_tree("new")
    assert os.listdir(tmp_path) == ["served"]
    # An empty folder and a new one (parents created) are written too.
    (tmp_path / "empty").mkdir()
    for new in (tmp_path / "empty", tmp_path / "a" / "b"):
        exporters[what](str(new))
        assert _tree(str(new)) == _exported_tree("new")


@pytest.mark.parametrize("what", ["TextTranslator.export", "export_with_keys"])
def test_files_added_during_the_export_are_kept(exporters, what, tmp_path):
    # The user adds README.txt while the TensorFlow subprocess runs (10 s
    # or more): the swap finds it and puts the old export back, with it.
    path = _previous_export(tmp_path)
    exporters.during = lambda staged: _add(path, "README.txt")
    message = REFUSED.format(
        what=what,
        path=path,
        holds="holds other files than a SavedModel",
        entries=["README.txt"],
        outcome="the folder was left as it was",
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        exporters[what](path)
    expected = _exported_tree("old")
    expected["README.txt"] = hashlib.sha256(b"mine").hexdigest()
    assert _tree(path) == expected
    assert os.listdir(tmp_path) == ["served"]


@pytest.mark.parametrize("what", ["TextTranslator.export", "export_with_keys"])
def test_failed_export_keeps_the_previous_export(exporters, what, tmp_path):
    # TensorFlow fails after writing part of the SavedModel: the previous
    # export is untouched (export_with_keys used to write into it).
    path = _previous_export(tmp_path)

    def fail(staged):
        raise RuntimeError(
            "The TensorFlow subprocess exporting the model failed (exit "
            f"status 1):\nFailed to write {staged}/variables/variables.index"
        )

    exporters.during = fail
    expected = (
        "The TensorFlow subprocess exporting the model failed (exit status "
        f"1):\nFailed to write {path}/variables/variables.index"
    )
    with pytest.raises(RuntimeError) as raised:
        exporters[what](path)
    # The error names the user's folder, not the hidden working one.
    assert str(raised.value) == expected
    assert _tree(path) == _exported_tree("old")
    assert os.listdir(tmp_path) == ["served"]


def _model():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))


def test_unzipped_save_replaces_only_a_previous_unzipped_save(tmp_path):
    model = _model()
    # A project folder: the save used to delete thesis.tex.
    project = str(tmp_path / "project")
    _add(project, "thesis.tex")
    message = REFUSED.format(
        what="The unzipped save",
        path=project,
        holds="is not an unzipped Keras save (it has no config.json)",
        entries=["thesis.tex"],
        outcome="nothing was written",
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        save_model(model, project, zipped=False)
    assert _tree(project) == {"thesis.tex": hashlib.sha256(b"mine").hexdigest()}
    # A previous unzipped save with a user's file: refused, unchanged.
    saved = str(tmp_path / "saved")
    save_model(model, saved, zipped=False)
    assert sorted(os.listdir(saved)) == [
        "assets",
        "config.json",
        "metadata.json",
        "model.weights.h5",
    ]
    _add(saved, "README.txt")
    before = _tree(saved)
    message = REFUSED.format(
        what="The unzipped save",
        path=saved,
        holds="holds other files than an unzipped Keras save",
        entries=["README.txt"],
        outcome="nothing was written",
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        save_model(model, saved, zipped=False)
    assert _tree(saved) == before
    # Without it: replaced by the new weights.
    os.remove(os.path.join(saved, "README.txt"))
    model.get_layer("dense").kernel.assign(np.ones((3, 2), "float32"))
    save_model(model, saved, zipped=False)
    loaded = keras.saving.load_model(saved)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded.get_layer("dense").kernel),
        np.ones((3, 2), "float32"),
    )
    assert sorted(os.listdir(tmp_path)) == ["project", "saved"]


def test_bundle_save_keeps_files_added_during_the_save(tmp_path, monkeypatch):
    bundle = _bundle()
    path = str(tmp_path / "bundle")
    bundle.save(path)
    before = _tree(path)
    real_save = type(bundle.translator).save

    def slow_save(model, filepath, *args, **kwargs):
        _add(path, "notes.txt")
        return real_save(model, filepath, *args, **kwargs)

    monkeypatch.setattr(type(bundle.translator), "save", slow_save)
    message = REFUSED.format(
        what="TextTranslator.save",
        path=path,
        holds="holds other files than a TextTranslator bundle",
        entries=["notes.txt"],
        outcome="the folder was left as it was",
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        bundle.save(path)
    before["notes.txt"] = hashlib.sha256(b"mine").hexdigest()
    assert _tree(path) == before
    assert os.listdir(tmp_path) == ["bundle"]
