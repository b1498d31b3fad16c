"""The saving behaviour of kmodels' own models, in one mixin."""

from kmodels.saving.atomic import save_model
from kmodels.saving.portable_optimizer import portable_compile_config


class SavingModel:
    """Mixin of kmodels' `keras.Model` subclasses (`Translator`,
    `Autoencoder`): atomic `save`, and a compile config that names the
    portable `keras.optimizers` class, so a file resumes training on every
    backend. Put it before `keras.Model` in the bases."""

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
        # Records `keras.optimizers.Adam`, not torch's own Adam class, so
        # the file resumes training on every backend.
        return portable_compile_config(super().get_compile_config())

    def compile_from_config(self, config):
        # Files saved on torch before (or by plain Keras) record torch's
        # optimizer class: rebuild the portable one instead.
        super().compile_from_config(portable_compile_config(config))
