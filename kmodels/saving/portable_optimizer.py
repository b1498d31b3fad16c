"""Compile configs that resume training on any backend."""

import copy
import json
import os
import shutil
import tempfile
import zipfile

import keras

from kmodels.backend import keras_internals


def _portable_class_name(config):
    # Torch swaps `keras.optimizers.Adam` for its own Adam class (and so for
    # SGD, RMSprop, AdamW...), kept in a backend module of Keras; a saved
    # config records that class, which TensorFlow and JAX then rebuild and
    # fail to train with.
    if not isinstance(config, dict):
        return None
    module = config.get("module")
    name = config.get("class_name")
    if not (
        keras_internals.is_backend_optimizer_module(module)
        and isinstance(name, str)
    ):
        return None
    portable = getattr(keras.optimizers, name, None)
    if isinstance(portable, type) and issubclass(
        portable, keras.optimizers.Optimizer
    ):
        return name
    return None


def _normalise(value):
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if not isinstance(value, dict):
        return value
    value = {k: _normalise(v) for k, v in value.items()}
    if _portable_class_name(value) is not None:
        value["module"] = "keras.optimizers"
        value["registered_name"] = None
    return value


def portable_compile_config(config):
    """Returns `config` with every backend-specific optimizer class replaced
    by the `keras.optimizers` class it specialises.

    On torch, `model.compile(optimizer="adam")` makes torch's own Adam
    class, a subclass kept in a backend module of Keras, and
    `model.get_compile_config()` (hence every `.keras` file) records that
    module. Loaded on TensorFlow or JAX, the model predicts the same, but
    the torch optimizer is rebuilt and the next `fit` raises a `TypeError`.
    Recorded as `keras.optimizers.Adam` it becomes each backend's own Adam
    (torch swaps in its class again). The optimizer's configuration is
    kept, and its variables (iterations, moments) load as before: they are
    saved in the same order on every backend. Optimizers of other modules
    (your own) are left as they are.

    Args:
        config: a compile config (dict, as from `get_compile_config()`),
            or `None`/`{}`.

    Returns:
        A new dict (the input is not modified).

    Example:

    >>> model.compile(optimizer="adam")  # on torch: torch's own Adam
    >>> config = portable_compile_config(model.get_compile_config())
    >>> config["optimizer"]["module"]
    'keras.optimizers'
    """
    if not config:
        return config
    return _normalise(copy.deepcopy(config))


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """`keras.saving.load_model`, with the optimizer portable across
    backends.

    Any `.keras` file, whoever saved it (an older kmodels, plain Keras, on
    any backend), has its compile config normalised with
    `portable_compile_config` before Keras reads it, so training resumes on
    this backend with the saved optimizer state. kmodels' own models
    (`Translator`, `Autoencoder`) do this themselves, also through
    `keras.saving.load_model`; use this function for other models. Files
    that need no change are loaded directly; the others are rewritten to a
    temporary copy (the file itself is not modified). Other formats (a
    folder saved with `zipped=False`, `.h5`) are handed to Keras as they
    are.

    Args:
        filepath: str or path-like.
        custom_objects: as in Keras.
        compile: as in Keras.
        safe_mode: as in Keras.

    Returns:
        The loaded model.

    Example:

    >>> model = load_model("saved_on_torch.keras")  # on TensorFlow or JAX
    >>> model.fit(x, y)  # resumes with the saved Adam moments
    """
    kwargs = dict(
        custom_objects=custom_objects, compile=compile, safe_mode=safe_mode
    )
    path = None
    if isinstance(filepath, (str, os.PathLike)):
        path = os.fspath(filepath)
    if (
        path is None
        or not path.endswith(".keras")
        or not zipfile.is_zipfile(path)
    ):
        return keras.saving.load_model(filepath, **kwargs)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
        portable = _normalise(config)
        if portable == config:
            return keras.saving.load_model(filepath, **kwargs)
        work = tempfile.mkdtemp(prefix="kmodels-load-")
        try:
            copy_path = os.path.join(work, os.path.basename(path))
            with zipfile.ZipFile(copy_path, "w") as out:
                for info in archive.infolist():
                    if info.filename == "config.json":
                        out.writestr(info, json.dumps(portable))
                    else:
                        with (
                            archive.open(info) as src,
                            out.open(info, "w") as dst,
                        ):
                            shutil.copyfileobj(src, dst, 1 << 20)
            return keras.saving.load_model(copy_path, **kwargs)
        finally:
            shutil.rmtree(work, ignore_errors=True)
