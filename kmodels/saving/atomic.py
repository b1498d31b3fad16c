"""Saves that either complete or leave the previous file as it was."""

import fnmatch
import io
import os
import re
import shutil
import tempfile

import keras

from kmodels.backend import keras_internals

# Prefix of the hidden working folder a save creates next to its target; a
# process killed mid-save (the only way one survives) leaves it behind.
_WORK_PREFIX = ".kmodels-save-"


class FolderLayout:
    """What a save or an export writes in its folder, to replace a previous
    one without deleting anything it did not write.

    A folder is a previous write of this layout when it holds `marker` (if
    given) and nothing else than the `files` and `folders` patterns allow;
    an empty folder can always be replaced. Patterns are `fnmatch` patterns
    of paths relative to the folder, with `/` separators (`*` matches `/`
    too). A symbolic link is never part of a layout.

    Args:
        name: str, what the folder holds, for messages (`"a SavedModel"`).
        files: patterns of the files it writes.
        folders: patterns of the folders it writes (possibly empty ones).
        marker: optional str, a file every such folder holds.
    """

    def __init__(self, name, files, folders=(), marker=None):
        self.name = name
        self.files = tuple(files)
        self.folders = tuple(folders)
        self.marker = marker

    def foreign_entries(self, path):
        """The sorted relative paths of what folder `path` holds that this
        layout does not write (folders with a trailing `/`, not listed
        inside); every top-level entry when `marker` is missing."""
        names = sorted(os.listdir(path))
        marker = self.marker and os.path.join(path, self.marker)
        if names and marker and not _is_file(marker):
            return [
                n + "/" if _is_folder(os.path.join(path, n)) else n
                for n in names
            ]
        found = []
        for folder, dirs, files in os.walk(path):
            rel = os.path.relpath(folder, path).replace(os.sep, "/")
            prefix = "" if rel == "." else rel + "/"
            for name in list(dirs):
                entry = prefix + name
                if not _is_folder(os.path.join(folder, name)) or not any(
                    fnmatch.fnmatchcase(entry, p) for p in self.folders
                ):
                    found.append(entry + "/")
                    dirs.remove(name)
            for name in files:
                entry = prefix + name
                if not _is_file(os.path.join(folder, name)) or not any(
                    fnmatch.fnmatchcase(entry, p) for p in self.files
                ):
                    found.append(entry)
        return sorted(found)


def _is_file(path):
    return os.path.isfile(path) and not os.path.islink(path)


def _is_folder(path):
    return os.path.isdir(path) and not os.path.islink(path)


# What `tf.saved_model.save` writes (TensorFlow 2.21: `saved_model.pb`,
# `fingerprint.pb`, `variables/variables.index` and `.data-*` shards,
# `assets/`), and nothing more: kmodels' exporters add no file and their
# lookup tables hold their keys as constants, so `assets/` stays empty.
SAVED_MODEL = FolderLayout(
    "a SavedModel",
    files=(
        "saved_model.pb",
        "fingerprint.pb",
        "variables/variables.index",
        "variables/variables.data-?????-of-?????",
    ),
    folders=("variables", "assets"),
    marker="saved_model.pb",
)

# What `keras.saving.save_model(..., zipped=False)` writes (Keras 3.15):
# the JSON files, the weights, and `assets/`, where each layer with assets
# (a `StringLookup`'s vocabulary, ...) writes files under names it chooses.
KERAS_FOLDER = FolderLayout(
    "an unzipped Keras save",
    files=(
        "config.json",
        "metadata.json",
        "model.weights.h5",
        "model.weights.npz",
        "assets/*",
    ),
    folders=("assets", "assets/*"),
    marker="config.json",
)


# Without a layout, a folder holds nothing a write made.
_NOTHING = FolderLayout("nothing", files=())


def _listing(entries):
    shown = repr(entries[:5])
    if len(entries) > 5:
        shown += f" and {len(entries) - 5} more"
    return shown


_NOT_A_FOLDER = (
    "{what} expects a folder path; {path!r} is a file. Remove it or choose "
    "another path; nothing was written."
)


def _refuse_foreign(path, folder, layout, what, entries, outcome):
    """Raises the `ValueError` naming the `entries` of `folder` (the user's
    folder `path`, or where it was moved aside) that `layout` does not
    write."""
    if layout is None:
        holds = "is not empty: "
    elif layout.marker and not _is_file(os.path.join(folder, layout.marker)):
        holds = f"is not {layout.name} (it has no {layout.marker}): "
    else:
        holds = f"holds other files than {layout.name}: "
    raise ValueError(
        f"{what} replaces the whole folder {path!r}, which {holds}"
        f"{_listing(entries)}. Move them out of the folder (replacing it "
        f"would delete them) or choose a new or empty folder; {outcome}."
    )


def check_replaceable(path, layout, what):
    """Raises a `ValueError` unless writing `layout` at `path` would delete
    nothing it did not write.

    `path` may be missing, an empty folder, or a folder holding a previous
    write of `layout` and nothing else (see `FolderLayout`). Every entry
    point that replaces a folder (`TextTranslator.save` and `.export`,
    `kmodels.models.export_with_keys`, `save_model(..., zipped=False)`)
    calls this before writing anything, and `write_atomically` again on
    the folder it moved aside, so that files added meanwhile are kept too.

    Args:
        path: str or path-like, the folder to be replaced.
        layout: a `FolderLayout`, what the write puts there.
        what: str naming the caller in messages (`"TextTranslator.export"`).

    Raises:
        ValueError: `path` is a file, or a folder holding other entries than
            `layout` (the message names them, at most five).
    """
    path = os.fspath(path)
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise ValueError(_NOT_A_FOLDER.format(what=what, path=path))
    entries = layout.foreign_entries(path)
    if entries:
        _refuse_foreign(
            path, path, layout, what, entries, "nothing was written"
        )


def check_built(model, what=None):
    """Raises a `ValueError` when `model` has no weights to save yet.

    Keras only warns and writes a file without weights; reloaded, such a
    model gets new random weights and silently computes something else.

    Args:
        model: a `keras.Model`.
        what: optional str, what was being saved (prefixes the message).
    """
    if model.built:
        return
    prefix = f"{what}: " if what else ""
    raise ValueError(
        f"{prefix}{type(model).__name__} {model.name!r} has no weights yet: "
        "call it on a batch or fit it before saving (saved now, it would "
        "reload with new random weights)."
    )


def _fsync_tree(path):
    paths = [path]
    if os.path.isdir(path):
        paths = [
            os.path.join(folder, name)
            for folder, _, names in os.walk(path)
            for name in names
        ]
    # Flushed to disk before the rename, so that a power cut cannot leave
    # the new name on empty data. Best effort: some platforms refuse
    # fsync on a read-only handle.
    for file_path in paths:
        with open(file_path, "rb") as f:
            try:
                os.fsync(f.fileno())
            except OSError:
                pass


def write_atomically(path, write, layout=None, what="The save"):
    """Calls `write(staged_path)`, then moves what it wrote to `path`.

    `write` must create `staged_path` (a file or a folder, named like
    `path`, in a hidden working folder beside `path`). Only once it has
    returned does the result replace `path`: a file with one `os.replace`
    (atomic on POSIX and Windows); a folder by renaming the old one aside,
    the new one in, then deleting the old one (restored if the second
    rename fails). If `write` or a rename raises, `path` keeps its previous
    bytes and the working folder is deleted.

    A folder is only replaced when that deletes nothing the write did not
    make: when it is empty or, given `layout`, holds a previous write of
    it and nothing else (`check_replaceable`, run before `write` and again
    on the old folder once moved aside, for files added during the write;
    refused then, the old folder is moved back as it was).

    Errors name `path`, never the working folder: the paths inside it in
    an exception's message, file names and causes are replaced by `path`,
    so a failure reads as a direct write to `path` would.

    Args:
        path: str or path-like, the final file or folder.
        write: callable taking the staged path (str).
        layout: optional `FolderLayout` of the folder `write` makes.
        what: str naming the caller in messages.

    Returns:
        What `write` returned.

    Raises:
        ValueError: `path` is a file and `write` made a folder, or the
            reverse, or `path` is a folder holding other entries than
            `layout` (or any entry, without `layout`).
        Exception: what `write` or the file system raised, its messages
            naming `path` where they named the working folder.
    """
    given = os.fspath(path)
    if layout is not None:
        check_replaceable(given, layout, what)
    path = os.path.realpath(given)
    parent, name = os.path.split(path)
    work = None
    try:
        work = tempfile.mkdtemp(prefix=_WORK_PREFIX + name + ".", dir=parent)
        staged = os.path.join(work, name)
        result = write(staged)
        if not os.path.lexists(staged):
            raise RuntimeError(f"Nothing was written for {given!r}.")
        _fsync_tree(staged)
        if not _is_folder(staged):
            if _is_folder(path):
                raise ValueError(
                    f"{what} writes a file at {given!r}, which is a folder. "
                    "Remove the folder or choose another path; nothing was "
                    "changed."
                )
            os.replace(staged, path)
        elif not os.path.lexists(path):
            os.replace(staged, path)
        elif not os.path.isdir(path):
            raise ValueError(_NOT_A_FOLDER.format(what=what, path=given))
        else:
            aside = os.path.join(work, name + ".previous")
            os.replace(path, aside)
            try:
                entries = (layout or _NOTHING).foreign_entries(aside)
                if entries:
                    _refuse_foreign(
                        given,
                        aside,
                        layout,
                        what,
                        entries,
                        "the folder was left as it was",
                    )
                os.replace(staged, path)
            except BaseException:
                os.replace(aside, path)
                raise
        return result
    except BaseException as error:
        _name_user_path(error, parent, name, given)
        raise
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _name_user_path(error, parent, name, given):
    """Rewrites, in place, the paths of the working folder of a write to
    `parent/name` in `error`'s message and file names, and in its causes,
    as `given` (the path the user passed)."""
    working = re.compile(
        re.escape(os.path.join(parent, _WORK_PREFIX + name + "."))
        + r"[a-z0-9_]+(?:"
        + re.escape(os.sep + name)
        + r"(?:\.previous)?)?"
    )

    def user(value):
        if isinstance(value, str):
            return working.sub(lambda match: given, value)
        return value

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.args = tuple(user(a) for a in error.args)
        if isinstance(error, OSError):
            # Only set when renamed: a slot set to None, even unchanged,
            # changes `str(error)` ("[Errno None] None: None").
            for attribute in ("strerror", "filename", "filename2"):
                value = getattr(error, attribute)
                if user(value) != value:
                    setattr(error, attribute, user(value))
        error = error.__cause__ or error.__context__


def save_model(model, filepath, overwrite=True, zipped=None, **kwargs):
    """`keras.saving.save_model`, but a failed save leaves the old file.

    Keras opens the target for writing before it serialises anything, so
    an error mid-save (a layer whose `save_own_variables` raises, a full
    disk, an interrupt) leaves a truncated, unloadable file where the last
    good one was. This writes to a hidden working folder beside `filepath`
    and moves the result into place only once it is complete (see
    `write_atomically`): the previous file stays byte-identical on any
    failure. kmodels' own models (`Translator`, `Autoencoder`) do this in
    `model.save`; use this function for any other model, e.g. a plain
    `keras.Model` holding kmodels layers.

    File objects and remote paths (`hf://`, `gs://`...) are handed to Keras
    unchanged (no atomicity).

    Args:
        model: a built `keras.Model`.
        filepath: str or path-like ending in `.keras` (or `.h5`, or a folder
            with `zipped=False`: new, empty, or holding a previous unzipped
            save and nothing else).
        overwrite: as in Keras: when `False`, asks before replacing.
        zipped: as in Keras.
        **kwargs: other `keras.saving.save_model` arguments.

    Raises:
        ValueError: the model was never built (it has no weights yet);
            `filepath` is a folder (a file would replace it) or, with
            `zipped=False`, a file or a folder holding other files than an
            unzipped Keras save (`config.json`, `metadata.json`, the
            weights, `assets/`), which replacing it would delete. Any error
            Keras raises, naming `filepath` (never the hidden working
            folder). In every case no file is changed.

    Example:

    >>> import keras
    >>> from kmodels.layers import PatchEmbedding
    >>> inputs = keras.Input((8, 8, 1))
    >>> model = keras.Model(inputs, PatchEmbedding(4, 6)(inputs))
    >>> save_model(model, "patches.keras")
    """
    check_built(model)
    if isinstance(filepath, io.IOBase) or "://" in str(filepath):
        return keras.saving.save_model(
            model, filepath, overwrite=overwrite, zipped=zipped, **kwargs
        )
    # Unzipped, Keras writes a folder: it replaces a previous one only.
    layout = KERAS_FOLDER if zipped is False else None
    what = "The unzipped save" if layout else "The save"
    if layout:
        check_replaceable(filepath, layout, what)
    if os.path.exists(filepath) and not overwrite:
        if not keras_internals.ask_to_proceed_with_overwrite(filepath):
            return None

    def write(staged):
        keras.saving.save_model(
            model, staged, overwrite=True, zipped=zipped, **kwargs
        )

    return write_atomically(filepath, write, layout, what)
