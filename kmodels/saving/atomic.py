"""Saves that either complete or leave the previous file as it was."""

import io
import os
import shutil
import tempfile

import keras
from keras.src.utils.io_utils import ask_to_proceed_with_overwrite

# Prefix of the hidden working folder a save creates next to its target; a
# process killed mid-save (the only way one survives) leaves it behind.
_WORK_PREFIX = ".kmodels-save-"


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


def write_atomically(path, write):
    """Calls `write(staged_path)`, then moves what it wrote to `path`.

    `write` must create `staged_path` (a file or a folder, named like
    `path`, in a hidden working folder beside `path`). Only once it has
    returned does the result replace `path`: a file with one `os.replace`
    (atomic on POSIX and Windows); a folder by renaming the old one aside,
    the new one in, then deleting the old one (restored if the second
    rename fails). If `write` or a rename raises, `path` keeps its previous
    bytes and the working folder is deleted.

    Args:
        path: str or path-like, the final file or folder.
        write: callable taking the staged path (str).

    Returns:
        What `write` returned.

    Raises:
        ValueError: `write` made a folder but `path` is an existing file.
    """
    path = os.path.realpath(os.fspath(path))
    parent, name = os.path.split(path)
    work = tempfile.mkdtemp(prefix=_WORK_PREFIX + name + ".", dir=parent)
    try:
        staged = os.path.join(work, name)
        result = write(staged)
        if not os.path.lexists(staged):
            raise RuntimeError(f"Nothing was written for {path!r}.")
        _fsync_tree(staged)
        if os.path.isdir(staged) and os.path.lexists(path):
            if not os.path.isdir(path):
                raise ValueError(
                    f"{path!r} is a file; a folder was to replace it. "
                    "Remove it or choose another path."
                )
            aside = os.path.join(work, name + ".previous")
            os.replace(path, aside)
            try:
                os.replace(staged, path)
            except BaseException:
                os.replace(aside, path)
                raise
        else:
            os.replace(staged, path)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
            with `zipped=False`).
        overwrite: as in Keras: when `False`, asks before replacing.
        zipped: as in Keras.
        **kwargs: other `keras.saving.save_model` arguments.

    Raises:
        ValueError: the model was never built (it has no weights yet), or
            any error Keras raises; in every case no file is changed.

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
    if os.path.exists(filepath) and not overwrite:
        if not ask_to_proceed_with_overwrite(filepath):
            return None

    def write(staged):
        keras.saving.save_model(
            model, staged, overwrite=True, zipped=zipped, **kwargs
        )

    return write_atomically(filepath, write)
