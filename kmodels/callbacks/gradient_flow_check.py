import os

import keras

from kmodels.arguments import ArgumentTypeError
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.backend.gradients import SummaryWriter
from kmodels.diagnostics.gradient_flow import check_gradient_flow
from kmodels.diagnostics.gradient_monitor import GradientMonitor
from kmodels.diagnostics.gradient_plot import plot_gradient_history


def _check_not_a_file(log_dir):
    """TensorBoard's writer fails inside `fit` with TensorFlow's
    `FailedPreconditionError` on a `log_dir` that is a file."""
    if os.path.exists(log_dir) and not os.path.isdir(log_dir):
        raise ValueError(
            "GradientFlowCheck: `log_dir` must be a folder (for TensorBoard "
            f"event files); got {log_dir!r}, an existing file."
        )


class GradientFlowCheck(keras.callbacks.Callback):
    """Checks the gradient flow once when `fit` starts, or every
    `every_n_steps` train steps.

    With `every_n_steps=None` (the default), `check_gradient_flow` runs
    once: training stops before its first step with a `GradientFlowError`
    (raised from `on_train_begin`, so `fit` raises it) when a trainable
    variable gets no gradient or the output ignores the input.

    With `every_n_steps=N`, a `GradientMonitor` records the per-variable
    gradient norms, zero and non-finite fractions of the loss on
    `sample_batch` when training starts and after every N optimizer steps
    (`history`), and flags a variable whose gradient is zero or
    non-finite at `patience` consecutive checks (`flags`, and a
    `GradientFlowWarning`). Training goes on. With `log_dir`, each check is
    also written as TensorBoard scalars and histograms. The check uses the
    model's compiled loss unless `loss` is given.

    Args:
        sample_batch: `(x, y)`, a small batch with at least two different
            examples.
        loss: optional loss callable; defaults to the compiled loss.
        verbose: print the gradient table (once), or one line per check.
        every_n_steps: check every N train steps instead of once.
        patience: consecutive zero or non-finite checks before a variable
            is flagged (with `every_n_steps`).
        log_dir: folder for TensorBoard event files (with `every_n_steps`):
            None, a str or an `os.PathLike`; an existing file is refused
            (also when `fit` starts, if one was made there since).

    Raises:
        ValueError: `every_n_steps` (an int >= 1 or None) or `patience`
            (an int >= 1) of the wrong value (bools are refused, NumPy
            ints accepted), `log_dir` an existing file or given without
            `every_n_steps`; `log_dir` of the wrong type raises an
            `ArgumentTypeError`, a `TypeError` and a `ValueError`.

    Example:

    ```python
    model.fit(x, y, callbacks=[GradientFlowCheck((x[:8], y[:8]))])
    check = GradientFlowCheck((x[:8], y[:8]), every_n_steps=100)
    model.fit(x, y, epochs=5, callbacks=[check])
    check.flags, check.plot("gradients.png")
    ```
    """

    def __init__(
        self,
        sample_batch,
        loss=None,
        verbose=False,
        every_n_steps=None,
        patience=3,
        log_dir=None,
    ):
        super().__init__()
        if (
            not isinstance(sample_batch, (tuple, list))
            or len(sample_batch) != 2
        ):
            raise ValueError(
                "GradientFlowCheck expects `sample_batch=(x, y)`; got "
                f"{type(sample_batch).__name__}."
            )
        owner = "GradientFlowCheck"
        every_n_steps = check_optional_int(
            every_n_steps, "every_n_steps", owner
        )
        patience = check_int(patience, "patience", owner)
        if log_dir is not None:
            if isinstance(log_dir, bytes) or not isinstance(
                log_dir, (str, os.PathLike)
            ):
                raise ArgumentTypeError(
                    f"{owner}: `log_dir` must be None or a folder path (a "
                    f"str or os.PathLike); got {log_dir!r} "
                    f"({type(log_dir).__name__})."
                )
            log_dir = os.fspath(log_dir)
            _check_not_a_file(log_dir)
            if every_n_steps is None:
                raise ValueError(
                    "GradientFlowCheck writes `log_dir` at each periodic "
                    "check: pass `every_n_steps` with it."
                )
        self.sample_batch = tuple(sample_batch)
        self.loss = loss
        self.verbose = verbose
        self.every_n_steps = every_n_steps
        self.patience = patience
        self.log_dir = log_dir
        self.report = None
        self.monitor = None
        self._writer = None
        self._offset = 0
        self._base = 0
        self._optimizer = None
        self._last_check = None

    @property
    def history(self):
        """`{step: {path: GradientRecord}}` of the periodic checks."""
        return {} if self.monitor is None else self.monitor.history

    @property
    def flags(self):
        """The `GradientFlowFlag`s raised by the periodic checks."""
        return [] if self.monitor is None else self.monitor.flags

    def plot(self, path, title=None, size=(640, 400)):
        """Writes a PNG of each layer's gradient norm over the checked
        steps (`kmodels.diagnostics.plot_gradient_history`)."""
        if self.monitor is None or not self.monitor.history:
            raise ValueError(
                "GradientFlowCheck.plot needs periodic checks: pass "
                "`every_n_steps` and call `fit` first."
            )
        return plot_gradient_history(
            self.monitor, path, titles=[title], size=size
        )

    def on_train_begin(self, logs=None):
        if self.log_dir is not None:
            # A file made there since the callback was.
            _check_not_a_file(self.log_dir)
        x, y = self.sample_batch
        if self.every_n_steps is None:
            self.report = check_gradient_flow(
                self.model, x, y, loss=self.loss, verbose=self.verbose
            )
            return
        model = self.model
        if self.monitor is None or self.monitor.model is not model:
            self.monitor = GradientMonitor(
                model, x, y, loss=self.loss, patience=self.patience
            )
        if self.log_dir is not None:
            self._writer = SummaryWriter(self.log_dir)
        optimizer = getattr(model, "optimizer", None)
        if self._last_check is not None and optimizer is not self._optimizer:
            # Reused with a new optimizer (recompiled, e.g. after freezing
            # a layer), whose step count restarted: its steps are numbered
            # after the checks already recorded, from the next multiple of
            # `every_n_steps`, and the first one is checked. The same
            # optimizer in a later `fit` counts on.
            n = self.every_n_steps
            self._base = 0
            self._base = (self._last_check // n + 1) * n - self._iterations()
            self._last_check = None
        self._optimizer = optimizer
        self._offset = self._iterations()
        self._maybe_check(self._offset)

    def on_epoch_begin(self, epoch, logs=None):
        if self.every_n_steps is not None:
            self._offset = self._iterations()

    def on_train_batch_begin(self, batch, logs=None):
        # Not `on_train_batch_end`: a callback with that hook turns off
        # Keras' asynchronous callback dispatch on JAX. The check before
        # batch k sees the weights after step k - 1. Only counters are
        # read between checks (reading `self.model` syncs JAX's state).
        if self.every_n_steps is not None:
            self._maybe_check(self._offset + batch)

    def on_epoch_end(self, epoch, logs=None):
        if self.every_n_steps is not None:
            self._maybe_check(self._iterations())

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _iterations(self):
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return self._offset
        return self._base + int(
            keras.ops.convert_to_numpy(optimizer.iterations)
        )

    def _maybe_check(self, step):
        n = self.every_n_steps
        # With `steps_per_execution > 1` the step count moves by more than
        # one between calls: check at the first step at or past a multiple.
        if self._last_check is not None and step // n <= self._last_check // n:
            return
        self._last_check = step
        # The property puts JAX's latest state back into the variables.
        _ = self.model
        self.monitor.check(step)
        if self._writer is not None:
            self._writer.write(step, *self.monitor.summaries(step))
        if self.verbose:
            records = self.monitor.history[step].values()
            bad = sum(r.status not in ("ok", "frozen") for r in records)
            print(
                f"GradientFlowCheck step {step}: loss "
                f"{self.monitor.losses[step]:.4f}, {bad} of {len(records)} "
                "variable(s) without a finite non-zero gradient"
            )
