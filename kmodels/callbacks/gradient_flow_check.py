import keras

from kmodels.diagnostics.gradient_flow import check_gradient_flow


class GradientFlowCheck(keras.callbacks.Callback):
    """Runs `check_gradient_flow` once when `fit` starts.

    Training stops before its first step with a `GradientFlowError` (raised
    from `on_train_begin`, so `fit` raises it) when a trainable variable gets
    no gradient or the output ignores the input. The check uses the model's
    compiled loss unless `loss` is given.

    Args:
        sample_batch: `(x, y)`, a small batch with at least two different
            examples.
        loss: optional loss callable; defaults to the compiled loss.
        verbose: print the gradient table.

    Example:

    ```python
    model.fit(x, y, callbacks=[GradientFlowCheck((x[:8], y[:8]))])
    ```
    """

    def __init__(self, sample_batch, loss=None, verbose=False):
        super().__init__()
        if (
            not isinstance(sample_batch, (tuple, list))
            or len(sample_batch) != 2
        ):
            raise ValueError(
                "GradientFlowCheck expects `sample_batch=(x, y)`; got "
                f"{type(sample_batch).__name__}."
            )
        self.sample_batch = tuple(sample_batch)
        self.loss = loss
        self.verbose = verbose
        self.report = None

    def on_train_begin(self, logs=None):
        x, y = self.sample_batch
        self.report = check_gradient_flow(
            self.model, x, y, loss=self.loss, verbose=self.verbose
        )
