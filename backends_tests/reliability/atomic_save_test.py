"""Saves are all or nothing; a model without weights is not saved (#16).

Keras opens a `.keras` target for writing before it serialises anything:
an error mid-save used to leave a truncated file where the last good one
was, and `TextTranslator.save` could rewrite `translator.keras` and then
fail on `text.json`. A never-built model was saved without weights (only a
Keras warning). Each test below makes a save fail at one point and checks
that every byte of the previous file or bundle is still there, with no
working files left beside it.
"""

import errno
import hashlib
import json
import os
import re

import keras
import numpy as np
import pytest

from kmodels.layers import PatchEmbedding
from kmodels.saving import save_model
from kmodels.saving import write_atomically
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import TextTranslator
from kmodels.seq2seq import Translator
from kmodels.seq2seq import text_translator as translate_module
from kmodels.testing.exports import tiny_bundle

np_ = keras.ops.convert_to_numpy
CONTEXT = np.array([[4, 5, 6, 0], [7, 8, 0, 0]])
TARGET_IN = np.array([[2, 9, 10], [2, 11, 0]])


def _digest(path):
    """sha256 of a file, or {relative path: sha256} of a folder's files."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    return {
        os.path.relpath(os.path.join(folder, name), path): _digest(
            os.path.join(folder, name)
        )
        for folder, _, names in os.walk(path)
        for name in names
    }


def _translator():
    keras.utils.set_random_seed(3)
    model = Translator(20, 20, units=4)
    model((CONTEXT, TARGET_IN))
    return model


def _autoencoder():
    keras.utils.set_random_seed(3)
    model = Autoencoder(20, units=4)
    model(CONTEXT)
    return model


def _functional():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((8, 8, 1))
    return keras.Model(inputs, PatchEmbedding(4, 6, name="patches")(inputs))


def _perturb(model):
    """New weights, so that a save that went through would change bytes."""
    model.set_weights([w + 0.25 for w in model.get_weights()])


def _fail(layer, monkeypatch):
    def refuse(store):
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(layer, "save_own_variables", refuse)


MODELS = {
    # (builder, saver, the sublayer made to fail, an input)
    "Translator.save": (
        _translator,
        lambda model, path: model.save(path),
        lambda model: model.decoder,
        (CONTEXT, TARGET_IN),
    ),
    "Autoencoder.save": (
        _autoencoder,
        lambda model, path: model.save(path),
        lambda model: model.output_layer,
        CONTEXT,
    ),
    "kmodels.saving.save_model(keras.Model)": (
        _functional,
        save_model,
        lambda model: model.get_layer("patches"),
        np.linspace(0, 1, 128, dtype="float32").reshape(2, 8, 8, 1),
    ),
}


@pytest.mark.parametrize("case", sorted(MODELS))
def test_failed_save_keeps_the_previous_file(case, tmp_path, monkeypatch):
    build, save, failing_layer, x = MODELS[case]
    model = build()
    path = str(tmp_path / "model.keras")
    save(model, path)
    before = _digest(path)
    _perturb(model)
    _fail(failing_layer(model), monkeypatch)
    with pytest.raises(RuntimeError, match=r"^disk full \(simulated\)$"):
        save(model, path)
    assert _digest(path) == before
    assert os.listdir(tmp_path) == ["model.keras"]


def test_plain_keras_save_truncates_the_previous_file(tmp_path, monkeypatch):
    # Why the above matters: the same failure through Keras' own save
    # (Keras 3.15) destroys the previous file.
    model = _translator()
    path = str(tmp_path / "model.keras")
    model.save(path)
    _fail(model.decoder, monkeypatch)
    with pytest.raises(RuntimeError):
        keras.saving.save_model(model, path)
    with pytest.raises(Exception):
        keras.saving.load_model(path)


@pytest.mark.parametrize("case", sorted(MODELS))
def test_successful_save_replaces_the_file(case, tmp_path):
    build, save, _, x = MODELS[case]
    model = build()
    path = str(tmp_path / "model.keras")
    save(model, path)
    _perturb(model)
    save(model, path)
    assert os.listdir(tmp_path) == ["model.keras"]
    np.testing.assert_array_equal(
        np_(keras.saving.load_model(path)(x)), np_(model(x))
    )


UNBUILT = (
    "{prefix}{cls} '{name}' has no weights yet: call it on a batch or fit "
    "it before saving (saved now, it would reload with new random weights)."
)


@pytest.mark.parametrize("cls", ["Translator", "Autoencoder"])
def test_saving_a_model_without_weights_raises(cls, tmp_path):
    model = (
        Translator(20, 20, units=4, name="unbuilt")
        if cls == "Translator"
        else Autoencoder(20, units=4, name="unbuilt")
    )
    message = UNBUILT.format(prefix="", cls=cls, name="unbuilt")
    path = str(tmp_path / "model.keras")
    for save in (model.save, lambda p: save_model(model, p)):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            save(path)
    assert os.listdir(tmp_path) == []
    # Over a previous file: refused before anything is written.
    good = _translator()
    good.save(path)
    before = _digest(path)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        model.save(path)
    assert _digest(path) == before
    assert not model.built and model.weights == []


def _bundle(separator=" "):
    return tiny_bundle(separator)


TEXTS = ["hola casa", "esta en casa hola"]
# Ids inside both bundle vocabularies (8 and 9 tokens), to build the model.
BUNDLE_BATCH = (np.array([[4, 5, 6, 0]]), np.array([[2, 4, 5]]))


def _saved_bundle(tmp_path):
    bundle = _bundle()
    bundle.translator(BUNDLE_BATCH)
    path = str(tmp_path / "bundle")
    bundle.save(path)
    before = _digest(path)
    assert sorted(before) == ["text.json", "translator.keras"]
    # Changed weights and separator: a save that went through would change
    # both files.
    _perturb(bundle.translator)
    bundle.separator = "_"
    return bundle, path, before


def _check_unchanged(tmp_path, path, before):
    assert _digest(path) == before
    assert os.listdir(tmp_path) == ["bundle"]


def test_bundle_failing_in_the_model_file_is_unchanged(tmp_path, monkeypatch):
    bundle, path, before = _saved_bundle(tmp_path)
    _fail(bundle.translator.decoder, monkeypatch)
    with pytest.raises(RuntimeError, match=r"^disk full \(simulated\)$"):
        bundle.save(path)
    _check_unchanged(tmp_path, path, before)


def test_bundle_failing_in_the_json_file_is_unchanged(tmp_path, monkeypatch):
    # The probe's half-updated bundle: translator.keras written, then the
    # second file fails.
    bundle, path, before = _saved_bundle(tmp_path)

    def refuse(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(translate_module.json, "dump", refuse)
    with pytest.raises(OSError, match=r"^disk full \(simulated\)$"):
        bundle.save(path)
    monkeypatch.undo()
    _check_unchanged(tmp_path, path, before)


def test_bundle_failing_in_the_swap_is_restored(tmp_path, monkeypatch):
    # The swap is two renames (old folder aside, new folder in): the second
    # one fails here, after the first one moved the old bundle away.
    bundle, path, before = _saved_bundle(tmp_path)
    real_replace = os.replace
    calls = []

    def replace(src, dst):
        calls.append((os.path.basename(src), os.path.basename(dst)))
        if len(calls) == 2:
            raise OSError("rename failed (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match=r"^rename failed \(simulated\)$"):
        bundle.save(path)
    monkeypatch.undo()
    # The inner translator.keras save ran first (one rename in its own
    # working folder), so the folder swap's first rename is call 2.
    assert calls[1] == ("bundle", "bundle.previous")
    _check_unchanged(tmp_path, path, before)


def test_bundle_save_replaces_the_whole_bundle(tmp_path):
    bundle, path, before = _saved_bundle(tmp_path)
    expected = bundle(TEXTS)
    bundle.save(path)
    after = _digest(path)
    assert sorted(after) == ["text.json", "translator.keras"]
    assert after["translator.keras"] != before["translator.keras"]
    assert os.listdir(tmp_path) == ["bundle"]
    loaded = TextTranslator.load(path)
    assert loaded.separator == "_"
    assert loaded(TEXTS) == expected
    with open(os.path.join(path, "text.json")) as f:
        assert json.load(f)["separator"] == "_"


def test_bundle_of_an_unbuilt_translator_raises(tmp_path):
    bundle = _bundle()
    name = bundle.translator.name
    message = UNBUILT.format(
        prefix="TextTranslator.save: ", cls="Translator", name=name
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        bundle.save(str(tmp_path / "bundle"))
    assert os.listdir(tmp_path) == []
    assert not bundle.translator.built


def test_bundle_refuses_a_folder_with_other_files(tmp_path):
    bundle = _bundle()
    bundle.translator(BUNDLE_BATCH)
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    message = (
        f"TextTranslator.save replaces the whole folder {str(folder)!r}, "
        "which holds other files than a TextTranslator bundle: "
        "['notes.txt']. Move them out of the folder (replacing it would "
        "delete them) or choose a new or empty folder; nothing was written."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        bundle.save(str(folder))
    assert _digest(str(folder)) == {"notes.txt": _digest(folder / "notes.txt")}
    file = tmp_path / "file"
    file.write_text("x")
    message = (
        f"TextTranslator.save expects a folder path; {str(file)!r} is a "
        "file. Remove it or choose another path; nothing was written."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        bundle.save(str(file))
    assert file.read_text() == "x"


# Save errors name the user's path, never the hidden working folder
# (`.kmodels-save-<name>.<random>`) the save writes in first (#26): each
# reads as the error of a direct write to the user's path.
def _os_error(code, path):
    return f"[Errno {code}] {os.strerror(code)}: {path!r}"


SAVERS = {
    "Translator.save": (_translator, lambda model, path: model.save(path)),
    "kmodels.saving.save_model": (_functional, save_model),
}


@pytest.mark.parametrize("saver", sorted(SAVERS))
def test_save_errors_name_the_users_path(saver, tmp_path):
    build, save = SAVERS[saver]
    model = build()
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder.keras").mkdir()
    cases = [
        # A missing parent folder, a parent that is a file: the working
        # folder could not be made beside the file.
        ("missing", "model.keras", FileNotFoundError, errno.ENOENT),
        ("file", "model.keras", NotADirectoryError, errno.ENOTDIR),
    ]
    for parent, name, error, code in cases:
        path = str(tmp_path / parent / name)
        with pytest.raises(error) as raised:
            save(model, path)
        assert str(raised.value) == _os_error(code, path)
        assert raised.value.filename == path
    # A folder where the file goes: Keras' IsADirectoryError named the
    # working folder's file.
    path = str(tmp_path / "folder.keras")
    message = (
        f"The save writes a file at {path!r}, which is a folder. Remove the "
        "folder or choose another path; nothing was changed."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        save(model, path)
    assert sorted(os.listdir(tmp_path)) == ["file", "folder.keras"]
    assert os.listdir(tmp_path / "folder.keras") == []


def test_errors_inside_the_working_folder_name_the_users_path(
    tmp_path, monkeypatch
):
    # A full disk while the bundle's text.json is written: the error names
    # bundle/text.json, as a direct write would.
    bundle, path, before = _saved_bundle(tmp_path)

    def full(obj, f, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f.name)

    monkeypatch.setattr(translate_module.json, "dump", full)
    with pytest.raises(OSError) as raised:
        bundle.save(path)
    monkeypatch.undo()
    file = os.path.join(path, "text.json")
    assert str(raised.value) == _os_error(errno.ENOSPC, file)
    _check_unchanged(tmp_path, path, before)
    # In a message and in its cause (a subprocess' error output, a
    # wrapped OSError): every path inside the working folder is renamed.
    target = str(tmp_path / "served")

    def write(staged):
        index = os.path.join(staged, "variables", "variables.index")
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), index)
        except OSError as error:
            raise RuntimeError(f"writing {staged} failed:\n{index}") from error

    with pytest.raises(RuntimeError) as raised:
        write_atomically(target, write)
    index = os.path.join(target, "variables", "variables.index")
    assert str(raised.value) == f"writing {target} failed:\n{index}"
    assert str(raised.value.__cause__) == _os_error(errno.ENOSPC, index)
    assert os.listdir(tmp_path) == ["bundle"]
