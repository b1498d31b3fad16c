import keras

from kmodels.contracts.hook import enforce


class InputContracts(keras.callbacks.Callback):
    """The contract hook as a callback: `callbacks=[InputContracts()]` in
    `fit`, `evaluate` or `predict` calls `kmodels.contracts.enforce` on the
    model, which stays enforced afterwards (the `*_on_batch` methods too).

    `enforce(model)` right after building the model does the same and also
    checks the arrays of the first call up front (an empty `(0, s)` array
    runs no step, so only the up-front check can refuse it).
    """

    def set_model(self, model):
        super().set_model(model)
        enforce(model)
