"""Gradient statistics at chosen train steps, and the variables whose
gradient stays zero or non-finite, the same on every backend."""

import dataclasses
import warnings

import keras
import numpy as np

from kmodels.backend import growth as growth_backend
from kmodels.backend.gradients import gradient_function
from kmodels.diagnostics.gradient_flow import GradientReport
from kmodels.diagnostics.gradient_flow import VariableGradient
from kmodels.diagnostics.gradient_flow import _likely_cause
from kmodels.diagnostics.gradient_flow import _norm_and_status
from kmodels.diagnostics.gradient_flow import _owning_layers
from kmodels.diagnostics.gradient_flow import _reported_variables
from kmodels.diagnostics.gradient_flow import _resolve_loss

# Statuses that count as "no gradient": TensorFlow's tape and torch
# autograd return None ("missing"), JAX returns zeros ("zero").
_NO_GRADIENT = ("missing", "zero")


class GradientFlowWarning(UserWarning):
    """Warned by `GradientMonitor` when a variable's gradient has been
    zero or non-finite at `patience` consecutive checks."""


@dataclasses.dataclass(frozen=True)
class GradientRecord:
    """One variable's gradient at one check.

    Attributes:
        path: the variable's path, e.g. `"dense/kernel"`.
        layer: the name of the model's layer that owns it (or `None`).
        shape: the variable's shape.
        norm: the L2 norm of the gradient (0.0 when the backend returned
            none; NaN or inf when an entry is); `None` when `"frozen"`.
        zero_fraction: the fraction of entries exactly 0 (1.0 when the
            backend returned no gradient); `None` when `"frozen"`.
        nonfinite_fraction: the fraction of NaN or infinite entries;
            `None` when `"frozen"`.
        status: `"ok"`, `"missing"` (no gradient: TensorFlow, torch),
            `"zero"` (all entries exactly 0: JAX's form of "missing", or a
            path cut to 0), `"nonfinite"`, or `"frozen"` (the variable was
            checked before and is no longer trainable).
    """

    path: str
    layer: str
    shape: tuple
    norm: float
    zero_fraction: float
    nonfinite_fraction: float
    status: str


@dataclasses.dataclass(frozen=True)
class GradientFlowFlag:
    """A variable whose gradient stayed zero or non-finite for `patience`
    consecutive checks.

    Attributes:
        step: the train step of the check that raised the flag.
        path: the variable's path.
        layer: the name of the layer that owns it (or `None`).
        kind: `"disconnected"` (no gradient at any check so far: its layer
            does not reach the loss), `"dead"` (a gradient at an earlier
            check, none since: the path was cut during training) or
            `"nonfinite"`.
        since: the step of the first check of the streak.
        cause: the most likely cause, in `check_gradient_flow`'s words.
    """

    step: int
    path: str
    layer: str
    kind: str
    since: int
    cause: str

    def message(self):
        what = {
            "disconnected": "has had no gradient",
            "dead": "has had no gradient",
            "nonfinite": "has had a NaN or infinite gradient",
        }[self.kind]
        return (
            f"step {self.step}: '{self.path}' {what} since step "
            f"{self.since} ({self.kind}). Most likely cause: {self.cause}."
        )


class GradientMonitor:
    """Per-variable gradient statistics of a fixed batch, one `check` at a
    time, with the variables whose gradient stays zero or non-finite.

    Each `check(step)` computes the gradients of the loss on the sample
    batch `(x, y)` with the model's current weights (`training=True`), with
    one compiled function per backend
    (`kmodels.backend.gradients.gradient_function`) that writes nothing:
    no weight, batch-norm statistic or seed state changes, and a
    `GrowableEmbedding` neither grows nor runs its sparse optimizer. The
    statistics are computed in NumPy (float64): the same code on every
    backend. The batch is fixed so that checks differ only by the weights;
    the training batches themselves never reach a callback.

    A variable is flagged (a `GradientFlowFlag` appended to `flags`, a
    `GradientFlowWarning` warned) at the check where its gradient has been
    missing or exactly 0, or non-finite, for `patience` consecutive checks;
    once per streak.

    Args:
        model: a built `keras.Model`.
        x: the sample input batch.
        y: the matching targets.
        loss: callable `(y_true, y_pred) -> scalar` or a loss name; defaults
            to the model's compiled loss.
        patience: consecutive bad checks before a variable is flagged.
        warn: warn a `GradientFlowWarning` for new flags.

    Attributes:
        history: `{step: {path: GradientRecord}}`, in check order.
        losses: `{step: loss on the sample batch}` (NaN at a check with no
            trainable variable).
        flags: every `GradientFlowFlag` raised, in order.
        gradients: `{path: NumPy gradient or None}` of the latest check.
    """

    def __init__(self, model, x, y, loss=None, patience=3, warn=True):
        if not isinstance(patience, int) or patience < 1:
            raise ValueError(
                f"GradientMonitor expects `patience` to be an integer >= 1 "
                f"(consecutive checks); got {patience!r}."
            )
        self.model = model
        self.x = x
        self.y = y
        self.loss_fn = _resolve_loss(model, loss)
        self.patience = patience
        self.warn = warn
        self.history = {}
        self.losses = {}
        self.flags = []
        self.gradients = {}
        self._function = None
        self._function_key = None
        self._streaks = {}  # path -> (kind, since, length, flagged)
        self._last_ok = {}  # path -> step of its latest "ok" check

    def _gradients(self, variables):
        key = tuple((id(v), tuple(v.shape)) for v in variables)
        if key != self._function_key:
            # A new set of trainable variables (a layer frozen or thawed)
            # or a table that grew: one compiled function per set.
            self._function = gradient_function(
                self.model, self.loss_fn, variables
            )
            self._function_key = key
        with growth_backend.sparse_updates_disabled():
            return self._function(self.x, self.y)

    def check(self, step):
        """Records the gradient statistics at `step`; returns the flags
        raised at this check."""
        model = self.model
        if not model.built:
            with growth_backend.sparse_updates_disabled():
                model(self.x)
        variables = _reported_variables(model)
        if variables:
            loss, grads = self._gradients(variables)
        else:  # Every layer frozen: nothing to differentiate.
            loss, grads = float("nan"), []
        owners = _owning_layers(model)
        records = {}
        self.gradients = {}
        for v, g in zip(variables, grads):
            layer = owners.get(id(v))
            records[v.path] = _record(v, layer, g)
            self.gradients[v.path] = g
        for path in self._known_paths() - records.keys():
            old = self._latest(path)
            records[path] = dataclasses.replace(
                old,
                norm=None,
                zero_fraction=None,
                nonfinite_fraction=None,
                status="frozen",
            )
        self.history[step] = records
        self.losses[step] = loss
        new = self._update_streaks(step, records, loss)
        self.flags += new
        if new and self.warn:
            warnings.warn(
                GradientFlowWarning(
                    "Gradient flow: " + " ".join(flag.message() for flag in new)
                ),
                stacklevel=2,
            )
        return new

    def _known_paths(self):
        paths = set()
        for records in self.history.values():
            paths.update(records)
        return paths

    def _latest(self, path):
        for records in reversed(self.history.values()):
            if path in records:
                return records[path]
        return None

    def _update_streaks(self, step, records, loss):
        new = []
        for path, record in records.items():
            if record.status == "ok":
                self._last_ok[path] = step
            kind = (
                "nonfinite"
                if record.status == "nonfinite"
                else "zero"
                if record.status in _NO_GRADIENT
                else None
            )
            if kind is None:
                self._streaks.pop(path, None)
                continue
            old = self._streaks.get(path)
            if old is None or old[0] != kind:
                old = (kind, step, 0, False)
            kind, since, length, flagged = old
            length += 1
            if length >= self.patience and not flagged:
                new.append(self._flag(step, record, kind, since, loss))
                flagged = True
            self._streaks[path] = (kind, since, length, flagged)
        return new

    def _flag(self, step, record, kind, since, loss):
        last_ok = self._last_ok.get(record.path)
        if kind == "zero" and last_ok is not None:
            kind = "dead"
            where = (
                "its layer"
                if record.layer is None
                else f"layer '{record.layer}'"
            )
            cause = (
                f"its gradient was non-zero at step {last_ok} and exactly 0 "
                f"since step {since}: the path from {where} to the loss was "
                "cut during training (a gate or scale that reached 0, ReLUs "
                "that all died, a layer downstream whose output became "
                "constant)"
            )
        else:
            kind = "disconnected" if kind == "zero" else "nonfinite"
            # The graph reading of `check_gradient_flow`, on this variable.
            report = GradientReport(
                backend=keras.backend.backend(),
                loss=loss,
                variables=[
                    VariableGradient(
                        path=record.path,
                        layer=record.layer,
                        shape=record.shape,
                        norm=record.norm,
                        status=record.status,
                    )
                ],
                output_depends_on_input=None,
            )
            cause = _likely_cause(self.model, report)
        return GradientFlowFlag(
            step=step,
            path=record.path,
            layer=record.layer,
            kind=kind,
            since=since,
            cause=cause,
        )

    def summaries(self, step):
        """TensorBoard scalars and histograms of the check at `step`:
        `({tag: float}, {tag: array})` with tags `gradient_norm/<path>`,
        `gradient_zero_fraction/<path>`, `gradient_nonfinite_fraction/<path>`
        and, for the latest check, `gradient/<path>` (the finite entries)."""
        scalars, histograms = {}, {}
        for path, r in self.history[step].items():
            if r.status == "frozen":
                continue
            scalars[f"gradient_norm/{path}"] = r.norm
            scalars[f"gradient_zero_fraction/{path}"] = r.zero_fraction
            scalars[f"gradient_nonfinite_fraction/{path}"] = (
                r.nonfinite_fraction
            )
            g = self.gradients.get(path)
            if g is not None and step == next(reversed(self.history)):
                histograms[f"gradient/{path}"] = g[np.isfinite(g)]
        return scalars, histograms

    def layer_norms(self):
        """`{layer: {step: norm}}`: the L2 norm of the gradients of each
        layer's variables (all of them together) at each check; frozen
        variables are left out, a layer with none checked is absent at
        that step."""
        norms = {}
        for step, records in self.history.items():
            squares = {}
            for r in records.values():
                if r.status == "frozen":
                    continue
                name = r.layer or r.path
                squares[name] = squares.get(name, 0.0) + r.norm**2
            for name, total in squares.items():
                norms.setdefault(name, {})[step] = float(np.sqrt(total))
        return norms


def _record(variable, layer, gradient):
    norm, status = _norm_and_status(gradient)
    size = int(np.prod(variable.shape))
    if gradient is None:
        zero, nonfinite, norm = 1.0, 0.0, 0.0
    elif size == 0:
        zero, nonfinite = 0.0, 0.0
    else:
        zero = float(np.count_nonzero(gradient == 0) / size)
        nonfinite = float(np.count_nonzero(~np.isfinite(gradient)) / size)
    return GradientRecord(
        path=variable.path,
        layer=None if layer is None else layer.name,
        shape=tuple(variable.shape),
        norm=norm,
        zero_fraction=zero,
        nonfinite_fraction=nonfinite,
        status=status,
    )
