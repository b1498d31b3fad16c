"""`run_layer_test`, which runs the checks of a layer class in order, and
its config and declared-shape checks (the others are in the modules beside
it)."""

import inspect

import keras
import numpy as np
from keras import tree

from kmodels.testing.layer_contract.calls import as_tuples
from kmodels.testing.layer_contract.calls import assert_same
from kmodels.testing.layer_contract.calls import build_layer
from kmodels.testing.layer_contract.calls import call_layer
from kmodels.testing.layer_contract.calls import check_mask
from kmodels.testing.layer_contract.calls import check_mask_shape
from kmodels.testing.layer_contract.calls import dtype_of
from kmodels.testing.layer_contract.calls import input_shapes
from kmodels.testing.layer_contract.calls import json_of
from kmodels.testing.layer_contract.calls import make_layer
from kmodels.testing.layer_contract.calls import parameters_of
from kmodels.testing.layer_contract.calls import specs
from kmodels.testing.layer_contract.calls import symbolic_inputs
from kmodels.testing.layer_contract.precision import check_precision
from kmodels.testing.layer_contract.saving import check_saving
from kmodels.testing.layer_contract.training import check_training_step
from kmodels.testing.layer_contract.training import functional_model
from kmodels.testing.layer_contract.training import randomize


def run_layer_test(
    cls,
    init_kwargs,
    input_data=None,
    call_kwargs=None,
    expected_output_shape=None,
    expected_output_dtype=None,
    expected_num_trainable_weights=None,
    expected_num_non_trainable_weights=None,
    supports_masking=None,
    expected_mask=None,
    run_training_check=True,
    training_target=None,
    loss="mse",
    fit_kwargs=None,
    updated_non_trainable_weights=(),
    run_saving_check=True,
    run_precision_check=True,
    refused_policies=None,
    tolerance=1e-6,
):
    """Checks the contract of a Keras layer (or model) class.

    In order, on instances made from `init_kwargs` (a `keras.layers.Layer`
    among them is cloned from its config for each instance, so that no two
    share it):

    1. Config: every `__init__` argument is in `get_config()`; numbers and
       bools passed in `init_kwargs` come back unchanged; `from_config`
       then `get_config` gives the same config (compared as JSON), and so
       does `keras.saving.serialize_keras_object` / `deserialize` (the
       class is registered).
    2. Build: `build()` with the input shapes (for a dict of call
       arguments, `<name>_shape` for each argument `build` names) creates
       every weight: the counts are as expected and an eager call then
       adds none. Before that call, every float weight is set to uniform
       draws in [0.1, 0.5) (seed 0), so that none keeps its initial value.
    3. Symbolic vs eager: a call on `keras.KerasTensor` inputs returns the
       same structure, shapes and dtypes as the eager call, and so do
       `compute_output_shape` and `compute_output_spec` where the class
       defines them; the eager outputs match `expected_output_shape` and
       `expected_output_dtype`.
    4. Masks: `supports_masking` as given; the mask attached to the first
       output (eager and symbolic) is `expected_mask`.
    5. Precision: under each of `PRECISION_POLICIES` every float output
       (of a symbolic call, and of a call traced by the backend, which runs
       the ops of `call`, or eager where the trace disagrees) is in the
       policy's compute dtype and every float variable stays float32; a
       policy in `refused_policies` must instead raise the declared error.
    6. Saving: the layer of the eager call, in a functional model (a
       `keras.Model` class: the model itself), saved with
       `kmodels.saving.save_model` and loaded with
       `kmodels.saving.load_model`, comes back as the same class with the
       same config, identical weights (the same trainable and
       non-trainable ones), the eager outputs (within `tolerance`) and
       their mask.
    7. Training: one `fit` step of that model (Adam, `loss` against
       `training_target`, one batch, the backend's default compilation,
       inputs checked by `kmodels.contracts.enforce`) changes every
       trainable weight, changes the non-trainable weights named in
       `updated_non_trainable_weights` and leaves the others bit-identical.

    Args:
        cls: the layer (or `keras.Model`) class.
        init_kwargs: dict, the constructor arguments.
        input_data: the inputs of a call: an array (or a tuple of arrays,
            passed as one argument, as `keras.Model` inputs), or a dict of
            call arguments by name (arrays). `None` runs the config check
            only (a layer that is not called on tensors).
        call_kwargs: dict of non-tensor call arguments (flags), passed to
            every call, symbolic and eager, and to `compute_output_shape`
            and `compute_output_spec` where they take them.
        expected_output_shape: the eager output shape, a tuple or a
            structure of tuples like the outputs.
        expected_output_dtype: a dtype name for every output, or a
            structure of names like the outputs.
        expected_num_trainable_weights: int, after build.
        expected_num_non_trainable_weights: int, after build.
        supports_masking: bool, the layer's `supports_masking`.
        expected_mask: the boolean mask the first eager output carries, or
            `False` for "no mask". `None` skips the check.
        run_training_check: bool.
        training_target: the `fit` target, structured like the outputs.
            Defaults to standard normal draws (seed 0) of the outputs'
            shapes: a random target gives every weight a gradient, where
            zeros would not reach the weights before a `LayerNormalization`.
        loss: the `compile` loss of the training step. Defaults to `"mse"`.
        fit_kwargs: dict of extra `fit` arguments (e.g. `callbacks`).
        updated_non_trainable_weights: names (the last part of a weight's
            path, e.g. `"moving_mean"`) of the non-trainable weights that
            the layer itself updates in a training step.
        run_saving_check: bool.
        run_precision_check: bool.
        refused_policies: dict `{policy name: (exception class, regex)}`,
            the policies the layer refuses: constructing it under one and
            calling it must raise that error with a message matching the
            regex (`re.search`).
        tolerance: absolute and relative tolerance of the loaded model's
            outputs against the eager ones (same weights, same ops: `0`
            where they must be identical).

    Returns:
        The layer of the eager call, for further checks: built, its weights
        drawn as in 2., saved and (with `run_training_check`) trained one
        step. With `input_data=None`, an instance made from `init_kwargs`.

    Example:

    ```python
    from kmodels.layers import PatchEmbedding
    from kmodels.testing.layer_contract import run_layer_test

    layer = run_layer_test(
        PatchEmbedding,
        dict(patch_size=2, embedding_dim=4),
        input_data=np.zeros((2, 4, 4, 1), "float32"),
        expected_output_shape=(2, 4, 4),
        expected_num_trainable_weights=2,
        expected_num_non_trainable_weights=0,
    )
    ```
    """
    call_kwargs = dict(call_kwargs or {})
    refused_policies = dict(refused_policies or {})
    where = cls.__name__
    layer = check_config(cls, init_kwargs, where)
    if input_data is None:
        return layer

    def check_counts(layer, when):
        for expected, weights, kind in (
            (
                expected_num_trainable_weights,
                layer.trainable_weights,
                "trainable",
            ),
            (
                expected_num_non_trainable_weights,
                layer.non_trainable_weights,
                "non-trainable",
            ),
        ):
            if expected is not None and len(weights) != expected:
                raise AssertionError(
                    f"{where} has {len(weights)} {kind} weights {when}; "
                    f"expected {expected}: {[w.path for w in weights]}."
                )

    # Build, draw the weights, then an eager call on the built layer.
    layer = make_layer(cls, init_kwargs)
    build_layer(layer, input_data)
    if not layer.built:
        raise AssertionError(f"{where}.build() did not mark it built.")
    check_counts(layer, "after build()")
    built_weights = [w.path for w in layer.weights]
    randomize(layer)
    eager = call_layer(layer, input_data, call_kwargs)
    called_weights = [w.path for w in layer.weights]
    if called_weights != built_weights:
        raise AssertionError(
            f"{where}: the first call changed the weights that build() "
            f"made: {built_weights} -> {called_weights} (create every "
            "weight in build())."
        )
    eager_spec = specs(eager)

    # Symbolic call on a fresh layer.
    symbolic_layer = make_layer(cls, init_kwargs)
    symbolic = call_layer(
        symbolic_layer, symbolic_inputs(input_data), call_kwargs
    )
    check_counts(symbolic_layer, "after a symbolic call")
    assert_same(eager_spec, specs(symbolic), where, "symbolic call")
    shapes = tree.map_structure(lambda x: tuple(x.shape), eager)
    _check_declared_shapes(layer, input_data, call_kwargs, eager, where)
    if expected_output_shape is not None:
        assert_same(
            as_tuples(expected_output_shape), shapes, where, "output shape"
        )
    if expected_output_dtype is not None:
        dtypes = tree.map_structure(dtype_of, eager)
        if isinstance(expected_output_dtype, str):
            expected = tree.map_structure(
                lambda _: expected_output_dtype, eager
            )
        else:
            expected = expected_output_dtype
        assert_same(expected, dtypes, where, "output dtype")

    if supports_masking is not None:
        if layer.supports_masking != supports_masking:
            raise AssertionError(
                f"{where}.supports_masking is {layer.supports_masking}; "
                f"expected {supports_masking}."
            )
    if expected_mask is not None:
        check_mask(eager, expected_mask, where, "eager output")
        check_mask_shape(symbolic, expected_mask, where)

    if run_precision_check:
        check_precision(
            cls, init_kwargs, input_data, call_kwargs, refused_policies, where
        )

    # The layer of the eager call, in a functional model: saved first (its
    # weights are still those of `eager`), then trained.
    if run_saving_check or run_training_check:
        model = functional_model(layer, input_data, call_kwargs)
    if run_saving_check:
        check_saving(model, layer, input_data, eager, tolerance, where)
    if run_training_check:
        check_training_step(
            model,
            layer,
            input_data,
            eager,
            training_target,
            loss,
            fit_kwargs,
            updated_non_trainable_weights,
            where,
        )
    return layer


def check_config(cls, init_kwargs, where):
    layer = make_layer(cls, init_kwargs)
    config = layer.get_config()
    parameters = inspect.signature(cls.__init__).parameters.values()
    missing = [
        p.name
        for p in parameters
        if p.name != "self"
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in config
    ]
    if missing:
        raise AssertionError(
            f"{where}.get_config() lacks the __init__ argument(s) {missing}; "
            f"it has {sorted(config)}."
        )
    for name, value in init_kwargs.items():
        number = isinstance(value, (bool, int, float, np.number))
        if number and name in config and config[name] != value:
            raise AssertionError(
                f"{where}.get_config()[{name!r}] is {config[name]!r}; the "
                f"layer was made with {value!r}."
            )
    revived = cls.from_config(config).get_config()
    if json_of(revived) != json_of(config):
        raise AssertionError(
            f"{where}: from_config(get_config()).get_config() differs from "
            f"get_config():\n{json_of(revived)}\n!=\n{json_of(config)}"
        )
    serialized = json_of(keras.saving.serialize_keras_object(layer))
    clone = keras.saving.deserialize_keras_object(serialized)
    if type(clone) is not cls:
        raise AssertionError(
            f"{where}: keras.saving.deserialize_keras_object gave a "
            f"{type(clone).__name__} (is the class registered with "
            "keras.saving.register_keras_serializable?)."
        )
    if json_of(clone.get_config()) != json_of(config):
        raise AssertionError(
            f"{where}: a serialize/deserialize round trip changed the config."
        )
    return layer


def _overrides(layer, method):
    own = getattr(type(layer), method)
    return own is not getattr(keras.layers.Layer, method) and own is not (
        getattr(keras.Model, method)
    )


def _check_declared_shapes(layer, input_data, call_kwargs, eager, where):
    shapes = tree.map_structure(lambda x: tuple(x.shape), eager)
    if _overrides(layer, "compute_output_shape"):
        fn = layer.compute_output_shape
        if isinstance(input_data, dict):
            names = parameters_of(fn)
            args = {
                f"{k}_shape": input_shapes(v)
                for k, v in input_data.items()
                if f"{k}_shape" in names
            }
            args.update({k: v for k, v in call_kwargs.items() if k in names})
            declared = fn(**args)
        else:
            declared = fn(input_shapes(input_data))
        assert_same(
            shapes, as_tuples(declared), where, "compute_output_shape gives a"
        )
    if _overrides(layer, "compute_output_spec"):
        symbolic = symbolic_inputs(input_data)
        names = parameters_of(layer.compute_output_spec)
        flags = {k: v for k, v in call_kwargs.items() if k in names}
        if isinstance(input_data, dict):
            spec = layer.compute_output_spec(**symbolic, **flags)
        else:
            spec = layer.compute_output_spec(symbolic, **flags)
        assert_same(
            specs(spec), specs(eager), where, "compute_output_spec differs:"
        )
