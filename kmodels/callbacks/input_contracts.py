import warnings

import keras

from kmodels.contracts.hook import enforce


class InputContracts(keras.callbacks.Callback):
    """Deprecated: call `kmodels.contracts.enforce(model)` instead.

    A user's functional model has one way to turn its input checks on:
    `kmodels.contracts.enforce(model)` once after building it (kmodels also
    calls it by itself the first time one of its layers runs inside the
    model). This callback, `callbacks=[InputContracts()]` in `fit`,
    `evaluate` or `predict`, calls `enforce` on the model and stays only
    for code written against earlier versions; it warns once per instance.

    Example:

    ```python
    model = kmodels.contracts.enforce(keras.Model(inputs, outputs))
    ```
    """

    def __init__(self):
        super().__init__()
        warnings.warn(
            "kmodels.callbacks.InputContracts is deprecated: call "
            "kmodels.contracts.enforce(model) once after building the "
            "model (it also checks the first compiled step).",
            DeprecationWarning,
            stacklevel=2,
        )

    def set_model(self, model):
        super().set_model(model)
        enforce(model)
