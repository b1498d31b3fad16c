"""Does every trainable weight get a gradient, and does the output depend on
the input? The same answer on every backend."""

import dataclasses

import keras
import numpy as np
from keras import ops

from kmodels.backend.gradients import variable_gradients

# keras-hub layers that read only the *shape* of their input and return
# position vectors: a layer whose output feeds nothing else is disconnected.
_SHAPE_ONLY_LAYERS = ("PositionEmbedding", "SinePositionEncoding")

SEED_003_CAUSE = (
    "token embedding output is not used: PositionEmbedding returns only "
    "position vectors; add them to the token embeddings"
)


class GradientFlowError(ValueError):
    """Raised by `check_gradient_flow` when some trainable variables get no
    gradient from the loss or the model's output ignores its input.

    Attributes:
        report: the `GradientReport` behind the error.
    """

    def __init__(self, report):
        self.report = report
        super().__init__(report.message())


@dataclasses.dataclass
class VariableGradient:
    """One row of a `GradientReport`.

    Attributes:
        path: the variable's path, e.g. `"embedding/embeddings"`.
        layer: the name of the model's layer that owns it (or `None`).
        shape: the variable's shape.
        norm: the L2 norm of its gradient, or `None` when the backend
            returned no gradient (TensorFlow and torch; JAX returns zeros).
        status: `"ok"`, `"missing"` (no gradient) or `"zero"` (exactly 0).
    """

    path: str
    layer: str
    shape: tuple
    norm: float
    status: str


@dataclasses.dataclass
class GradientReport:
    """What `gradient_report` found.

    Attributes:
        backend: the Keras backend the gradients were computed on.
        loss: the loss value on the sample batch.
        variables: one `VariableGradient` per trainable variable, in
            `model.trainable_variables` order.
        output_depends_on_input: `False` when inputs that differ gave the
            same outputs; `None` when the batch had no two different rows.
        cause: the most likely cause of a failure, in words (or `None`).
    """

    backend: str
    loss: float
    variables: list
    output_depends_on_input: bool
    cause: str = None

    @property
    def disconnected(self):
        """Paths of the variables whose gradient is missing or exactly 0."""
        return [v.path for v in self.variables if v.status != "ok"]

    @property
    def ok(self):
        return not self.disconnected and self.output_depends_on_input is not (
            False
        )

    def table(self):
        """The report as a fixed-width text table."""
        width = max([len("variable")] + [len(v.path) for v in self.variables])
        lines = [
            f"{'variable':<{width}}  {'shape':<14}  {'grad norm':>10}  status",
        ]
        for v in self.variables:
            norm = "None" if v.norm is None else f"{v.norm:.3e}"
            lines.append(
                f"{v.path:<{width}}  {str(v.shape):<14}  {norm:>10}  {v.status}"
            )
        depends = {True: "yes", False: "NO", None: "unknown"}[
            self.output_depends_on_input
        ]
        lines.append(
            f"loss {self.loss:.4f} on {self.backend}; output depends on "
            f"input: {depends}"
        )
        return "\n".join(lines)

    def message(self):
        """One paragraph saying what is wrong and the likely cause."""
        if self.ok:
            return "Gradient flow check passed."
        parts = ["Gradient flow check failed"]
        if self.disconnected:
            kinds = sorted({v.status for v in self.variables} - {"ok"})
            parts.append(
                f": {len(self.disconnected)} trainable variable(s) get no "
                f"gradient from the loss ({' / '.join(kinds)} on "
                f"{self.backend}): {self.disconnected}"
            )
        if self.output_depends_on_input is False:
            parts.append(
                ". The model's output does not depend on its input "
                "(different inputs gave the same output)"
            )
        if self.cause:
            parts.append(f". Most likely cause: {self.cause}")
        return "".join(parts) + "."


def _resolve_loss(model, loss):
    if loss is None:
        loss = getattr(model, "loss", None)
    if loss is None:
        raise ValueError(
            "gradient_report needs a loss: pass `loss=` (e.g. "
            "keras.losses.SparseCategoricalCrossentropy(from_logits=True)) "
            "or compile the model with one."
        )
    if isinstance(loss, (dict, list, tuple)):
        raise ValueError(
            "gradient_report supports one loss for a single-output model; "
            f"got {type(loss).__name__}: pass one `loss=` callable."
        )
    return keras.losses.get(loss) if isinstance(loss, str) else loss


def _owning_layers(model):
    """`id(variable) -> top-level layer` for a model's trainable variables."""
    owners = {}
    for layer in getattr(model, "layers", []):
        for v in layer.trainable_variables:
            owners.setdefault(id(v), layer)
    return owners


def _consumers(model):
    """`id(layer) -> layers that take its output`, for functional models."""
    consumers = {}
    for op in getattr(model, "operations", []):
        for node in getattr(op, "_inbound_nodes", []):
            for tensor in node.input_tensors:
                history = getattr(tensor, "_keras_history", None)
                if history is None:
                    continue
                producer = history.operation
                consumers.setdefault(id(producer), []).append(op)
    return consumers


def _likely_cause(model, report):
    """Names the most likely cause of the report's failures, in words."""
    owners = _owning_layers(model)
    consumers = _consumers(model)
    path_to_owner = {
        v.path: owners.get(id(v)) for v in model.trainable_variables
    }
    causes = []
    for path in report.disconnected:
        layer = path_to_owner.get(path)
        if layer is None:
            continue
        users = consumers.get(id(layer))
        if users is None and getattr(model, "operations", None):
            causes.append(
                f"layer '{layer.name}' is not used in the model's graph, so "
                f"its output cannot reach the loss"
            )
        elif users and all(
            type(u).__name__ in _SHAPE_ONLY_LAYERS for u in users
        ):
            user_names = ", ".join(f"'{u.name}'" for u in users)
            if isinstance(layer, keras.layers.Embedding):
                what = SEED_003_CAUSE
            else:
                what = (
                    f"the output of layer '{layer.name}' is not used: "
                    f"{type(users[0]).__name__} reads only its shape and "
                    "returns position vectors; add them to that output"
                )
            causes.append(
                f"{what} (layer '{layer.name}' feeds only {user_names}; "
                "kmodels.layers.PositionalEmbedding(embedding, "
                "sequence_length) does both)"
            )
    if causes:
        return "; ".join(dict.fromkeys(causes))
    if report.disconnected:
        return (
            "the output of the layers owning these variables does not reach "
            "the loss (a layer called only for its output's shape, a branch "
            "that is never used, a stop_gradient, or an integer cast)"
        )
    if report.output_depends_on_input is False:
        return (
            "no path from the inputs to the outputs carries information "
            "(an input used only for its shape, or a constant output)"
        )
    return None


def _output_depends_on_input(model, x):
    """Compares the outputs for the batch and for the batch rolled by one row;
    `None` if no row differs from the next."""
    flat = [ops.convert_to_numpy(t) for t in keras.tree.flatten(x)]
    if flat[0].ndim == 0 or flat[0].shape[0] < 2:
        return None
    differs = np.zeros(flat[0].shape[0], bool)
    for a in flat:
        rolled = np.roll(a, 1, axis=0)
        differs |= (a != rolled).reshape(len(a), -1).any(axis=1)
    if not differs.any():
        return None
    rolled_x = keras.tree.map_structure(
        lambda t: np.roll(ops.convert_to_numpy(t), 1, axis=0), x
    )
    out = [
        ops.convert_to_numpy(t)
        for t in keras.tree.flatten(model(x, training=False))
    ]
    out_rolled = [
        ops.convert_to_numpy(t)
        for t in keras.tree.flatten(model(rolled_x, training=False))
    ]
    for a, b in zip(out, out_rolled):
        # Row i: the output for x[i] against the output for x[i - 1].
        a = a[differs].astype("float64")
        b = b[differs].astype("float64")
        # Identical rows up to float32 rounding of the same computation.
        if np.abs(a - b).max() > 1e-6 * (1.0 + np.abs(a).max()):
            return True
    return False


def gradient_report(model, x, y, loss=None, verbose=True):
    """Per-variable gradient norms of the loss on one batch.

    The gradients come from the active backend's own autodiff (TensorFlow's
    `GradientTape`, `jax.value_and_grad` over `model.stateless_call`, torch
    autograd), so the report shows what training would see. A variable is
    flagged `"missing"` when the backend returns no gradient and `"zero"`
    when its gradient is exactly zero (JAX's form of the same problem). The
    model's outputs for `x` and for `x` rolled by one row along the batch are
    compared to flag a model whose output ignores its input.

    Args:
        model: a built `keras.Model`.
        x: a sample input batch (at least two different rows for the
            output check).
        y: the matching targets.
        loss: callable `(y_true, y_pred) -> scalar` or a loss name; defaults
            to the model's compiled loss.
        verbose: print the table.

    Returns:
        A `GradientReport`.

    Example:

    ```python
    report = kmodels.diagnostics.gradient_report(
        model, x[:8], y[:8],
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    report.disconnected  # e.g. ['embedding/embeddings']
    ```
    """
    loss_fn = _resolve_loss(model, loss)
    if not model.built:
        model(x)
    loss_value, grads = variable_gradients(model, loss_fn, x, y)
    owners = _owning_layers(model)
    rows = []
    for v, g in zip(model.trainable_variables, grads):
        if g is None:
            norm, status = None, "missing"
        else:
            norm = float(np.sqrt(np.sum(np.square(g.astype("float64")))))
            status = "zero" if norm == 0.0 else "ok"
        layer = owners.get(id(v))
        rows.append(
            VariableGradient(
                path=v.path,
                layer=None if layer is None else layer.name,
                shape=tuple(v.shape),
                norm=norm,
                status=status,
            )
        )
    report = GradientReport(
        backend=keras.backend.backend(),
        loss=loss_value,
        variables=rows,
        output_depends_on_input=_output_depends_on_input(model, x),
    )
    report.cause = _likely_cause(model, report)
    if verbose:
        print(report.table())
        if not report.ok:
            print(report.message())
    return report


def check_gradient_flow(model, x, y, loss=None, verbose=False):
    """Raises `GradientFlowError` unless every trainable variable gets a
    non-zero gradient and the output depends on the input.

    The error names the disconnected variables and the most likely cause;
    for the wiring of seed 003 (a token embedding fed to
    `keras_hub.layers.PositionEmbedding`, whose output alone goes on) it says
    "token embedding output is not used: PositionEmbedding returns only
    position vectors; add them to the token embeddings" on every backend.

    Args:
        model, x, y, loss, verbose: as in `gradient_report`
            (`verbose` defaults to `False` here).

    Returns:
        The `GradientReport` when the check passes.
    """
    report = gradient_report(model, x, y, loss=loss, verbose=verbose)
    if not report.ok:
        raise GradientFlowError(report)
    return report
