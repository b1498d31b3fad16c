"""The saving behaviour of kmodels' own models, in one mixin."""

import inspect

import keras

from kmodels.backend import optimizers
from kmodels.saving.atomic import save_model
from kmodels.saving.portable_optimizer import portable_compile_config

_COMPILE = inspect.signature(keras.Model.compile)


class SavingModel:
    """Mixin of kmodels' `keras.Model` subclasses (`Translator`,
    `Autoencoder`, `TranslatorSeq2SeqLM`): atomic `save`, and a compile
    config that resumes training on every backend: it names the portable
    `keras.optimizers` class, and keeps `jit_compile="auto"` as "auto".
    Put it before `keras.Model` in the bases.

    Keras records the value "auto" resolved to on the saving backend: a
    model compiled with the default on JAX (or, with kmodels' models, on
    TensorFlow) would record `True`, and the same file loaded on torch would
    train under `torch.compile` (a 3-epoch `fit` of a 4-unit `Translator`:
    87 s instead of under 1 s, measured). Here the file says "auto" and each
    backend resolves it as its own `compile` would.
    """

    def compile(self, *args, **kwargs):
        # Arguments `keras.Model.compile` does not have are a subclass's
        # (keras-hub's `sampler`), passed on.
        known = {k: v for k, v in kwargs.items() if k in _COMPILE.parameters}
        bound = _COMPILE.bind(self, *args, **known)
        self._jit_compile_was_auto = (
            bound.arguments.get("jit_compile", "auto") == "auto"
        )
        result = super().compile(*args, **kwargs)
        # torch: Adam's update in one fused pass, same numbers.
        optimizers.fuse_adam(getattr(self, "optimizer", None))
        return result

    def save(self, filepath, overwrite=True, zipped=None, **kwargs):
        """Saves the model as a `.keras` file, atomically.

        As `keras.Model.save`, but the file is written beside `filepath`
        and moved into place only when complete: a failed save leaves the
        previous file byte-identical (see `kmodels.saving.save_model`).

        Raises:
            ValueError: the model was never called or built (it has no
                weights yet); nothing is written.
        """
        return save_model(
            self, filepath, overwrite=overwrite, zipped=zipped, **kwargs
        )

    def get_compile_config(self):
        # Records `keras.optimizers.Adam`, not torch's own Adam class, and
        # "auto" as the user gave it, so the file resumes training on every
        # backend.
        config = portable_compile_config(super().get_compile_config())
        if config and getattr(self, "_jit_compile_was_auto", False):
            config = dict(config, jit_compile="auto")
        return config

    def compile_from_config(self, config):
        # Files saved on torch before (or by plain Keras) record torch's
        # optimizer class: rebuild the portable one instead. Keras' own
        # `compile_from_config` skips a model whose `compile` is overridden
        # (as here); these are its steps otherwise.
        config = keras.saving.deserialize_keras_object(
            portable_compile_config(config)
        )
        self.compile(**config)
        if hasattr(self, "optimizer") and self.built:
            # Creates the optimizer's variables, for the saved ones to load.
            self.optimizer.build(self.trainable_variables)
