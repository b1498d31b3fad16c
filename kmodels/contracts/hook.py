"""The contract hook of compiled `fit`, `evaluate`, `predict` and
`*_on_batch`.

Two places check the data, both before any compiled step sees it:

- the entry points (`fit`, `evaluate`, `predict`, `train_on_batch`,
  `test_on_batch`, `predict_on_batch`) check their whole `x` (and `y`)
  when they are arrays (NumPy or backend tensors, possibly nested), once,
  before Keras converts anything: an empty `(0, s)` batch, which runs no
  step at all, and int64 ids that JAX would wrap to int32 are caught there;
- the model's train, test and predict functions check each batch they are
  about to consume (data sets, generators), through
  `kmodels.backend.contracts.wrap_step_function`.
"""

import contextlib
import functools
import inspect

import keras
import numpy as np

from kmodels.backend.contracts import wrap_step_function
from kmodels.contracts import checks
from kmodels.contracts.structure import path_to

_KINDS = ("train", "test", "predict")


def _is_array(value):
    return isinstance(value, (np.ndarray, np.generic)) or (
        keras.ops.is_tensor(value) and checks.is_concrete(value)
    )


def _are_arrays(*values):
    leaves = [
        leaf
        for value in values
        if value is not None
        for leaf in keras.tree.flatten(value)
    ]
    return bool(leaves) and all(
        leaf is None or _is_array(leaf) for leaf in leaves
    )


@contextlib.contextmanager
def _prechecked(model):
    previous = getattr(model, "_kmodels_prechecked", False)
    model._kmodels_prechecked = True
    try:
        yield
    finally:
        model._kmodels_prechecked = previous


def _entry(model, x, y, training):
    """Checks the arrays of a call of an entry point; returns the scope in
    which the steps skip the per-batch check."""
    if _are_arrays(x, y):
        model._kmodels_check_batch(x, y, training)
        return _prechecked(model)
    return contextlib.nullcontext()


def _step_checker(model):
    def check(batches, training):
        if getattr(model, "_kmodels_prechecked", False):
            return
        for batch in batches:
            x, y, _ = keras.utils.unpack_x_y_sample_weight(batch)
            model._kmodels_check_batch(x, y, training)

    return check


def install_step_hook(model, kind):
    wrap_step_function(model, kind, _step_checker(model), checks.checked)


class ContractModel:
    """Mixin of kmodels' own models: every compiled entry point checks its
    data with `self.check_batch(x, y, training)` before any step runs."""

    def _kmodels_check_batch(self, x, y, training):
        self.check_batch(x, y, training)

    def make_train_function(self, force=False):
        super().make_train_function(force)
        install_step_hook(self, "train")
        return self.train_function

    def make_test_function(self, force=False):
        super().make_test_function(force)
        install_step_hook(self, "test")
        return self.test_function

    def make_predict_function(self, force=False):
        super().make_predict_function(force)
        install_step_hook(self, "predict")
        return self.predict_function

    def fit(self, x=None, y=None, *args, **kwargs):
        with _entry(self, x, y, True):
            return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        with _entry(self, x, y, False):
            return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        with _entry(self, x, None, False):
            return super().predict(x, *args, **kwargs)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        with _entry(self, x, y, True):
            return super().train_on_batch(x, y, *args, **kwargs)

    def test_on_batch(self, x, y=None, *args, **kwargs):
        with _entry(self, x, y, False):
            return super().test_on_batch(x, y, *args, **kwargs)

    def predict_on_batch(self, x):
        with _entry(self, x, None, False):
            return super().predict_on_batch(x)


# ------------------------------------------------ user functional models
def enforce(model):
    """Makes `model`'s compiled entry points check their data against the
    contracts of the kmodels layers it contains.

    One line for a functional `keras.Model` built from kmodels layers
    (kmodels' own models, `Translator` and `Autoencoder`, need none):

    ```python
    model = kmodels.contracts.enforce(keras.Model(inputs, outputs))
    ```

    From then on `fit`, `evaluate`, `predict`, `train_on_batch`,
    `test_on_batch` and `predict_on_batch` check, before any compiled
    step, the inputs that reach a kmodels layer straight from the model's
    inputs (`Encoder` tokens, `Decoder` ids and masks, `PositionalEmbedding`
    ids, `PatchEmbedding` images, `GrowableEmbedding` ids), with the same
    exceptions as the eager calls of those layers, on every backend. A
    refused call changes no weight and no optimizer variable. Returns
    `model`; calling it twice is harmless.
    """
    if isinstance(model, ContractModel) or getattr(
        model, "_kmodels_enforced", False
    ):
        return model
    entries = _functional_entries(model)

    def check_batch(x, y, training):
        for layer, located in entries:
            arguments = {}
            for name, locate in located.items():
                try:
                    arguments[name] = locate(x)
                except (KeyError, IndexError, TypeError):
                    continue
            checks.check_layer(layer, arguments, training)

    model._kmodels_check_batch = check_batch
    cls = type(model)

    def make(kind):
        base = getattr(cls, f"make_{kind}_function")

        def make_function(force=False):
            base(model, force)
            install_step_hook(model, kind)
            return getattr(model, f"{kind}_function")

        return make_function

    for kind in _KINDS:
        setattr(model, f"make_{kind}_function", make(kind))

    def entry(name, training, takes_y=True):
        base = getattr(cls, name)

        @functools.wraps(base)
        def method(x=None, y=None, *args, **kwargs):
            with _entry(model, x, y if takes_y else None, training):
                if takes_y:
                    return base(model, x, y, *args, **kwargs)
                if y is not None:
                    args = (y,) + args
                return base(model, x, *args, **kwargs)

        return method

    model.fit = entry("fit", True)
    model.evaluate = entry("evaluate", False)
    model.predict = entry("predict", False, takes_y=False)
    model.train_on_batch = entry("train_on_batch", True)
    model.test_on_batch = entry("test_on_batch", False)
    model.predict_on_batch = entry("predict_on_batch", False, takes_y=False)
    # Functions made before this call: wrap them now.
    for kind in _KINDS:
        install_step_hook(model, kind)
    model._kmodels_enforced = True
    return model


def _functional_entries(model):
    """`[(layer, {argument: locate(x)})]` for the kmodels layers of a
    functional model whose arguments come straight from its inputs."""
    struct = getattr(model, "_inputs_struct", None)
    entries = []
    if struct is None:
        return entries
    for layer in model.layers:
        if not type(layer).__module__.startswith("kmodels."):
            continue
        for node in getattr(layer, "_inbound_nodes", []):
            arguments = node.arguments
            try:
                bound = inspect.signature(layer.call).bind_partial(
                    *arguments.args, **arguments.kwargs
                )
            except TypeError:
                continue
            located = {}
            for name, value in bound.arguments.items():
                if isinstance(value, keras.KerasTensor):
                    path = path_to(struct, value)
                    if path is not None:
                        located[name] = path
                elif isinstance(value, (int, np.integer)) and not isinstance(
                    value, bool
                ):
                    located[name] = lambda x, v=value: v
            if any(
                isinstance(bound.arguments.get(n), keras.KerasTensor)
                for n in located
            ):
                entries.append((layer, located))
    return entries
