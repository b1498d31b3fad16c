"""Does every trainable weight get a gradient, and does the output depend on
the input? The same answer on every backend."""

import contextlib
import dataclasses

import keras
import numpy as np
from keras import ops

from kmodels.backend import growth as growth_backend
from kmodels.backend import keras_internals
from kmodels.backend.gradients import variable_gradients
from kmodels.growable.embedding import GrowableEmbedding

# keras-hub layers that read only the *shape* of their input and return
# position vectors: a layer whose output feeds nothing else is disconnected.
_SHAPE_ONLY_LAYERS = ("PositionEmbedding", "SinePositionEncoding")

POSITIONS_ONLY_CAUSE = (
    "token embedding output is not used: PositionEmbedding returns only "
    "position vectors; add them to the token embeddings"
)


class GradientFlowError(ValueError):
    """Raised by `check_gradient_flow` when some trainable variables get no
    gradient from the loss, a gradient is NaN or infinite, or the model's
    output ignores its input.

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
        status: `"ok"`, `"missing"` (no gradient), `"zero"` (exactly 0) or
            `"nonfinite"` (the gradient holds a NaN or an infinity).
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
            `model.variables` order. A `GrowableEmbedding` is reported as
            one row, its table (`".../embeddings"`, shape `(capacity,
            output_dim)`), with the dense gradient of the loss: its
            optimizer slots and step counter are the table optimizer's
            state, not weights, and are not listed. The same rows on every
            backend.
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
        return [
            v.path for v in self.variables if v.status in ("missing", "zero")
        ]

    @property
    def nonfinite(self):
        """Paths of the variables whose gradient holds a NaN or inf."""
        return [v.path for v in self.variables if v.status == "nonfinite"]

    @property
    def ok(self):
        return (
            not self.disconnected
            and not self.nonfinite
            and self.output_depends_on_input is not False
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
            kinds = sorted(
                {v.status for v in self.variables} & {"missing", "zero"}
            )
            parts.append(
                f": {len(self.disconnected)} trainable variable(s) get no "
                f"gradient from the loss ({' / '.join(kinds)} on "
                f"{self.backend}): {self.disconnected}"
            )
        if self.nonfinite:
            parts.append(
                f"{'.' if self.disconnected else ':'} "
                f"{len(self.nonfinite)} trainable variable(s) have a NaN or "
                f"infinite gradient (loss {self.loss}): {self.nonfinite}"
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
    if isinstance(loss, str):
        loss = keras.losses.get(loss)
    if not isinstance(loss, keras.losses.Loss) and getattr(
        loss, "__module__", ""
    ).startswith("keras."):
        # A Keras loss function (a name resolves to one) returns one value
        # per example: averaged, as `compile` does.
        loss = keras_internals.mean_loss(loss)
    return loss


def _reported_variables(model):
    """The variables a report lists, in `model.variables` order: the
    trainable ones, except a `GrowableEmbedding`'s slots and step (its
    optimizer's state, trainable variables on JAX only), plus the table of
    every trainable `GrowableEmbedding` (non-trainable on TensorFlow and
    torch, where its own optimizer writes it in place)."""
    tables, internal = set(), set()
    for layer in keras_internals.sublayers(model):
        if isinstance(layer, GrowableEmbedding) and layer.built:
            internal.update(id(v) for v in layer.slot_variables)
            internal.add(id(layer.trained_at))
            internal.update((id(layer.step), id(layer.embeddings)))
            if layer.trainable:
                tables.add(id(layer.embeddings))
    trainable = {id(v) for v in model.trainable_variables} - internal
    return [v for v in model.variables if id(v) in trainable or id(v) in tables]


def _owning_layers(model):
    """`id(variable) -> top-level layer` for a model's variables."""
    owners = {}
    for layer in getattr(model, "layers", []):
        for v in layer.variables:
            owners.setdefault(id(v), layer)
    return owners


def _consumers(model):
    """`id(layer) -> layers that take its output`, for functional models."""
    consumers = {}
    for op in getattr(model, "operations", []):
        for node in keras_internals.inbound_nodes(op):
            for parent in node.parent_nodes:
                consumers.setdefault(id(parent.operation), []).append(op)
    return consumers


def _likely_cause(model, report):
    """Names the most likely cause of the report's failures, in words."""
    owners = _owning_layers(model)
    consumers = _consumers(model)
    path_to_owner = {
        v.path: owners.get(id(v)) for v in _reported_variables(model)
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
                what = POSITIONS_ONLY_CAUSE
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
    if report.nonfinite:
        causes.append(
            f"the loss is {report.loss} on this batch"
            if not np.isfinite(report.loss)
            else "a NaN or infinity appears in the backward pass"
        )
        causes[-1] += (
            " (look for sqrt, log or a division at 0 or of a negative "
            "number, an overflowing exp, or labels out of range)"
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


def _output_depends_on_input(model, x, out):
    """Compares the outputs `out` for the batch and for the batch rolled by
    one row; `None` if no row differs from the next."""
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
    out_rolled = [
        ops.convert_to_numpy(t)
        for t in keras.tree.flatten(model(rolled_x, training=False))
    ]
    for a, b in zip(out, out_rolled):
        # Row i: the output for x[i] against the output for x[i - 1].
        a = a[differs].astype("float64")
        b = b[differs].astype("float64")
        # NaN against NaN (or inf against the same inf) is no difference.
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.nan_to_num(np.abs(a - b), nan=np.inf))
        finite = np.abs(a[np.isfinite(a)])
        scale = finite.max() if finite.size else 0.0
        # Identical rows up to float32 rounding of the same computation.
        if diff.max() > 1e-6 * (1.0 + scale):
            return True
    return False


def _is_sparse_categorical(loss_fn):
    """Whether `loss_fn` takes class ids against logits or probabilities on
    the last axis: Keras' sparse categorical cross-entropy (class or
    function), or a loss that says so with `sparse_categorical = True`
    (`kmodels.seq2seq.masked_loss`)."""
    fn = getattr(loss_fn, "fn", loss_fn)
    return fn is keras.losses.sparse_categorical_crossentropy or (
        getattr(loss_fn, "sparse_categorical", False) is True
    )


def _check_labels(loss_fn, y, out):
    """Raises the same `ValueError` on every backend when a sparse
    categorical loss gets a class id outside the model's output width
    (TensorFlow and torch would crash inside the loss, JAX would compute a
    meaningless number)."""
    if not _is_sparse_categorical(loss_fn):
        return
    outputs = keras.tree.flatten(out)
    if len(outputs) != 1 or len(outputs[0].shape) == 0:
        return
    width = int(outputs[0].shape[-1])
    labels = np.asarray(ops.convert_to_numpy(y))
    kwargs = getattr(loss_fn, "_fn_kwargs", {})
    ignore = kwargs.get("ignore_class")
    if ignore is not None:
        labels = labels[labels != ignore]
    if not labels.size or not np.issubdtype(labels.dtype, np.number):
        return
    low, high = labels.min().item(), labels.max().item()
    if low < 0 or high >= width:
        fn = getattr(loss_fn, "fn", loss_fn)
        name = getattr(loss_fn, "name", None) or getattr(fn, "__name__", fn)
        raise ValueError(
            f"gradient_report: `y` must hold class ids in [0, {width}) for "
            f"the sparse categorical loss '{name}', {width} being the size "
            f"of the last axis of the model's output; got labels from {low} "
            f"to {high}. Does the output layer have one unit per class, or "
            "are the labels 1-based?"
        )


@contextlib.contextmanager
def _model_state_kept(model):
    """Runs the diagnostic with growth and sparse updates of
    `GrowableEmbedding` tables off, and puts back every variable of the
    model and of its optimizer (values and shapes) afterwards: a safety net
    for anything else a training-mode call writes eagerly (batch-norm
    statistics, seed-generator state)."""
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        variables += list(optimizer.variables)
    tables = [
        layer
        for layer in keras_internals.sublayers(model)
        if isinstance(layer, GrowableEmbedding)
    ]
    logs = [len(t.growth_log) for t in tables]
    warned = [t._warned_unmanaged for t in tables]
    before = [np.array(ops.convert_to_numpy(v.value)) for v in variables]
    try:
        with growth_backend.sparse_updates_disabled():
            yield
    finally:
        for v, old in zip(variables, before):
            now = np.asarray(ops.convert_to_numpy(v.value))
            if now.shape != old.shape:
                growth_backend.resize_variable(v, old)
            elif now.tobytes() != old.tobytes():
                v.assign(old)
        for table, n, flag in zip(tables, logs, warned):
            del table.growth_log[n:]
            table._warned_unmanaged = flag


def _norm_and_status(g):
    if g is None:
        return None, "missing"
    norm = float(np.sqrt(np.sum(np.square(g.astype("float64")))))
    if not np.isfinite(norm):
        return norm, "nonfinite"
    return norm, "zero" if norm == 0.0 else "ok"


def gradient_report(model, x, y, loss=None, verbose=True):
    """Per-variable gradient norms of the loss on one batch.

    The gradients come from the active backend's own autodiff (TensorFlow's
    `GradientTape`, `jax.value_and_grad` over `model.stateless_call`, torch
    autograd), so the report shows what training would see. A variable is
    flagged `"missing"` when the backend returns no gradient, `"zero"`
    when its gradient is exactly zero (JAX's form of the same problem) and
    `"nonfinite"` when its gradient norm is NaN or infinite. The model's
    outputs for `x` and for `x` rolled by one row along the batch are
    compared to flag a model whose output ignores its input.

    The report changes nothing: no variable of the model or of its
    optimizer (weights, `GrowableEmbedding` tables, their optimizer slots
    and step counters, batch-norm statistics, seed state) and no table's
    capacity, on every backend. A `GrowableEmbedding` neither grows nor
    runs its sparse optimizer here: it is read like a plain embedding, its
    table gets the ordinary dense gradient of the loss, and ids at or past
    its capacity are unseen (zero vectors, no gradient). Every variable is
    also compared with a copy taken before and put back if anything wrote
    it.

    With a sparse categorical loss (Keras' `SparseCategoricalCrossentropy`
    or `sparse_categorical_crossentropy`, `kmodels.seq2seq.masked_loss`),
    labels are checked against the size of the last axis of the model's
    output before any gradient is computed: a label outside `[0, width)`
    (other than `ignore_class`) raises the same `ValueError` on every
    backend.

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
        with growth_backend.sparse_updates_disabled():
            model(x)
    with _model_state_kept(model):
        out = model(x, training=False)
        _check_labels(loss_fn, y, out)
        variables = _reported_variables(model)
        loss_value, grads = variable_gradients(
            model, loss_fn, x, y, variables=variables
        )
        depends = _output_depends_on_input(
            model, x, [ops.convert_to_numpy(t) for t in keras.tree.flatten(out)]
        )
    owners = _owning_layers(model)
    rows = []
    for v, g in zip(variables, grads):
        norm, status = _norm_and_status(g)
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
        output_depends_on_input=depends,
    )
    report.cause = _likely_cause(model, report)
    if verbose:
        print(report.table())
        if not report.ok:
            print(report.message())
    return report


def check_gradient_flow(model, x, y, loss=None, verbose=False):
    """Raises `GradientFlowError` unless every trainable variable gets a
    finite, non-zero gradient and the output depends on the input.

    The error names the disconnected variables (and those whose gradient
    is NaN or infinite) and the most likely cause; for the wiring of seed
    003 (a token embedding fed to `keras_hub.layers.PositionEmbedding`,
    whose output alone goes on) it says "token embedding output is not
    used: PositionEmbedding returns only position vectors; add them to the
    token embeddings" on every backend. Like `gradient_report`, it changes
    no variable and no table capacity, and raises a `ValueError` for a
    class id outside the model's output width with a sparse categorical
    loss.

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
