"""The contract every kmodels layer test starts from: `run_layer_test`.

Written for kmodels' layers in the spirit of Keras' and keras-hub's own
`run_layer_test`, with `keras.ops`, NumPy and Keras' backend-neutral
`compute_output_spec` only (no TensorFlow, JAX or torch import), so it
runs the same on TensorFlow, JAX and torch. Every failed check raises an
`AssertionError` that names the layer class and what differed.
"""

import inspect
import json
import os
import re
import tempfile

import keras
import numpy as np
from keras import ops
from keras import tree
from keras.src.backend import compute_output_spec

from kmodels.contracts import enforce
from kmodels.saving import load_model
from kmodels.saving import save_model

PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")

_FLOATS = ("float16", "bfloat16", "float32", "float64")


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
    layer = _check_config(cls, init_kwargs, where)
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
    layer = _make(cls, init_kwargs)
    _build(layer, input_data)
    if not layer.built:
        raise AssertionError(f"{where}.build() did not mark it built.")
    check_counts(layer, "after build()")
    built_weights = [w.path for w in layer.weights]
    _randomize(layer)
    eager = _call(layer, input_data, call_kwargs)
    called_weights = [w.path for w in layer.weights]
    if called_weights != built_weights:
        raise AssertionError(
            f"{where}: the first call changed the weights that build() "
            f"made: {built_weights} -> {called_weights} (create every "
            "weight in build())."
        )
    eager_spec = _spec(eager)

    # Symbolic call on a fresh layer.
    symbolic_layer = _make(cls, init_kwargs)
    symbolic = _call(symbolic_layer, _symbolic(input_data), call_kwargs)
    check_counts(symbolic_layer, "after a symbolic call")
    _assert_same(eager_spec, _spec(symbolic), where, "symbolic call")
    shapes = tree.map_structure(lambda x: tuple(x.shape), eager)
    _check_declared_shapes(layer, input_data, call_kwargs, eager, where)
    if expected_output_shape is not None:
        _assert_same(
            _tuples(expected_output_shape), shapes, where, "output shape"
        )
    if expected_output_dtype is not None:
        dtypes = tree.map_structure(_dtype, eager)
        if isinstance(expected_output_dtype, str):
            expected = tree.map_structure(
                lambda _: expected_output_dtype, eager
            )
        else:
            expected = expected_output_dtype
        _assert_same(expected, dtypes, where, "output dtype")

    if supports_masking is not None:
        if layer.supports_masking != supports_masking:
            raise AssertionError(
                f"{where}.supports_masking is {layer.supports_masking}; "
                f"expected {supports_masking}."
            )
    if expected_mask is not None:
        _check_mask(eager, expected_mask, where, "eager output")
        _check_mask_shape(symbolic, expected_mask, where)

    if run_precision_check:
        _check_precision(
            cls, init_kwargs, input_data, call_kwargs, refused_policies, where
        )

    # The layer of the eager call, in a functional model: saved first (its
    # weights are still those of `eager`), then trained.
    if run_saving_check or run_training_check:
        model = _functional(layer, input_data, call_kwargs)
    if run_saving_check:
        _check_saving(model, layer, input_data, eager, tolerance, where)
    if run_training_check:
        _check_training_step(
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


# ------------------------------------------------------------------ config
def _make(cls, init_kwargs, dtype=None):
    kwargs = {}
    for name, value in init_kwargs.items():
        if isinstance(value, keras.layers.Layer):
            value = type(value).from_config(value.get_config())
        kwargs[name] = value
    if dtype is not None:
        kwargs["dtype"] = dtype
    return cls(**kwargs)


def _json(value):
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def _check_config(cls, init_kwargs, where):
    layer = _make(cls, init_kwargs)
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
    if _json(revived) != _json(config):
        raise AssertionError(
            f"{where}: from_config(get_config()).get_config() differs from "
            f"get_config():\n{_json(revived)}\n!=\n{_json(config)}"
        )
    serialized = _json(keras.saving.serialize_keras_object(layer))
    clone = keras.saving.deserialize_keras_object(serialized)
    if type(clone) is not cls:
        raise AssertionError(
            f"{where}: keras.saving.deserialize_keras_object gave a "
            f"{type(clone).__name__} (is the class registered with "
            "keras.saving.register_keras_serializable?)."
        )
    if _json(clone.get_config()) != _json(config):
        raise AssertionError(
            f"{where}: a serialize/deserialize round trip changed the config."
        )
    return layer


# ------------------------------------------------------------------- calls
def _call(layer, inputs, call_kwargs):
    if isinstance(inputs, dict):
        return layer(**inputs, **call_kwargs)
    return layer(inputs, **call_kwargs)


def _dtype(x):
    return keras.backend.standardize_dtype(x.dtype)


def _symbolic(input_data):
    return tree.map_structure(
        lambda x: keras.KerasTensor(tuple(np.shape(x)), dtype=_dtype(x)),
        input_data,
    )


def _shapes(input_data):
    return tree.map_structure(lambda x: tuple(np.shape(x)), input_data)


def _spec(outputs):
    return tree.map_structure(lambda x: (tuple(x.shape), _dtype(x)), outputs)


def _tuples(shape):
    return tree.map_shape_structure(tuple, shape)


def _assert_same(expected, actual, where, what):
    if expected != actual:
        raise AssertionError(
            f"{where}: {what} {actual} differs from the expected {expected}."
        )


def _parameters(fn):
    return inspect.signature(fn).parameters


def _build(layer, input_data):
    if not isinstance(input_data, dict):
        layer.build(_shapes(input_data))
        return
    names = _parameters(layer.build)
    shapes = {
        f"{k}_shape": _shapes(v)
        for k, v in input_data.items()
        if f"{k}_shape" in names
    }
    if shapes:
        layer.build(**shapes)
    else:
        layer.build(_shapes(next(iter(input_data.values()))))


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
            names = _parameters(fn)
            args = {
                f"{k}_shape": _shapes(v)
                for k, v in input_data.items()
                if f"{k}_shape" in names
            }
            args.update({k: v for k, v in call_kwargs.items() if k in names})
            declared = fn(**args)
        else:
            declared = fn(_shapes(input_data))
        _assert_same(
            shapes, _tuples(declared), where, "compute_output_shape gives a"
        )
    if _overrides(layer, "compute_output_spec"):
        symbolic = _symbolic(input_data)
        names = _parameters(layer.compute_output_spec)
        flags = {k: v for k, v in call_kwargs.items() if k in names}
        if isinstance(input_data, dict):
            spec = layer.compute_output_spec(**symbolic, **flags)
        else:
            spec = layer.compute_output_spec(symbolic, **flags)
        _assert_same(
            _spec(spec), _spec(eager), where, "compute_output_spec differs:"
        )


# ------------------------------------------------------------------- masks
def _first_mask(outputs):
    return keras.src.backend.get_keras_mask(tree.flatten(outputs)[0])


def _check_mask(outputs, expected_mask, where, what):
    mask = _first_mask(outputs)
    if expected_mask is False:
        if mask is not None:
            raise AssertionError(f"{where}: the {what} carries a mask.")
        return
    if mask is None:
        raise AssertionError(f"{where}: the {what} carries no mask.")
    actual = ops.convert_to_numpy(mask)
    if not np.array_equal(actual, np.asarray(expected_mask)):
        raise AssertionError(
            f"{where}: the {what}'s mask is {actual.tolist()}; expected "
            f"{np.asarray(expected_mask).tolist()}."
        )


def _check_mask_shape(symbolic, expected_mask, where):
    mask = _first_mask(symbolic)
    if expected_mask is False:
        if mask is not None:
            raise AssertionError(f"{where}: the symbolic output has a mask.")
        return
    expected = tuple(np.shape(expected_mask))
    if mask is None or tuple(mask.shape) != expected:
        raise AssertionError(
            f"{where}: the symbolic output's mask is "
            f"{None if mask is None else tuple(mask.shape)}; expected shape "
            f"{expected}."
        )


# --------------------------------------------------------------- precision
def _traced(layer, input_data, call_kwargs):
    """The output specs of a call of the built `layer`, traced by the
    backend (`jax.eval_shape`, a TensorFlow graph, torch meta tensors): the
    ops of `call` and their dtypes, without compiling or running them."""
    _build(layer, input_data)
    symbolic = _symbolic(input_data)
    if isinstance(input_data, dict):
        return compute_output_spec(
            lambda **kw: layer(**kw, **call_kwargs), **symbolic
        )
    return compute_output_spec(lambda x: layer(x, **call_kwargs), symbolic)


def _output_dtypes_match(outputs, policy):
    floats = [_dtype(x) for x in tree.flatten(outputs)]
    return all(d == policy.compute_dtype for d in floats if d in _FLOATS)


def _check_output_dtypes(outputs, policy, where, what):
    if not _output_dtypes_match(outputs, policy):
        dtypes = [_dtype(x) for x in tree.flatten(outputs)]
        raise AssertionError(
            f"{where} under {policy.name}: {what} output dtypes {dtypes}; "
            f"float outputs must be {policy.compute_dtype}."
        )


def _check_precision(
    cls, init_kwargs, input_data, call_kwargs, refused_policies, where
):
    for name in PRECISION_POLICIES:
        policy = keras.dtype_policies.get(name)
        if name in refused_policies:
            error, pattern = refused_policies[name]
            try:
                layer = _make(cls, init_kwargs, dtype=name)
                _traced(layer, input_data, call_kwargs)
            except error as e:
                if not re.search(pattern, str(e)):
                    raise AssertionError(
                        f"{where} refused {name} with {str(e)!r}, which "
                        f"does not match {pattern!r}."
                    ) from e
                continue
            raise AssertionError(
                f"{where} is declared to refuse {name} with "
                f"{error.__name__}, but it built and ran."
            )
        symbolic = _call(
            _make(cls, init_kwargs, dtype=name),
            _symbolic(input_data),
            call_kwargs,
        )
        _check_output_dtypes(symbolic, policy, where, "symbolic")
        # Traced first: the dtypes of an eager call without one XLA
        # compilation per policy on JAX (seconds for a GRU). Where the trace
        # disagrees (torch traces on its "meta" device, where Keras'
        # autocasting of variables does not apply), an eager call decides.
        layer = _make(cls, init_kwargs, dtype=name)
        if not _output_dtypes_match(
            _traced(layer, input_data, call_kwargs), policy
        ):
            eager = _call(layer, input_data, call_kwargs)
            _check_output_dtypes(eager, policy, where, "eager")
        wrong = [
            (w.path, _dtype(w))
            for w in layer.weights
            if _dtype(w) in _FLOATS and _dtype(w) != policy.variable_dtype
        ]
        if wrong:
            raise AssertionError(
                f"{where} under {name}: variables {wrong} are not "
                f"{policy.variable_dtype}."
            )


# --------------------------------------------------------- training, saving
def _randomize(layer):
    """Sets every float weight to uniform draws in [0.1, 0.5) (seed 0), so
    that none keeps its initial value (a lost zero bias would reload as
    zeros, unnoticed). Positive: optimizer slots such as Adam's velocity
    must not be negative."""
    rng = np.random.default_rng(0)
    for w in layer.weights:
        if _dtype(w) in _FLOATS:
            w.assign(rng.uniform(0.1, 0.5, tuple(w.shape)).astype("float32"))


def _functional(layer, input_data, call_kwargs):
    """`layer` called on `keras.Input`s (batch size left free) in a
    functional model, with the inputs that reach a kmodels layer checked
    before each compiled step, as a user builds one (`kmodels.contracts`).
    A `keras.Model` is returned as it is."""
    if isinstance(layer, keras.Model):
        return layer
    if isinstance(input_data, dict):
        inputs = {
            k: keras.Input(np.shape(v)[1:], dtype=_dtype(v), name=k)
            for k, v in input_data.items()
        }
    else:
        inputs = tree.map_structure(
            lambda v: keras.Input(np.shape(v)[1:], dtype=_dtype(v)),
            input_data,
        )
    return enforce(keras.Model(inputs, _call(layer, inputs, call_kwargs)))


def _values(weights):
    return [np.array(ops.convert_to_numpy(w.value)) for w in weights]


def _check_training_step(
    model,
    layer,
    input_data,
    eager,
    training_target,
    loss,
    fit_kwargs,
    updated_non_trainable_weights,
    where,
):
    if training_target is None:
        rng = np.random.default_rng(0)
        training_target = tree.map_structure(
            lambda x: rng.standard_normal(tuple(x.shape)).astype("float32"),
            eager,
        )
    trainable = list(layer.trainable_weights)
    frozen = list(layer.non_trainable_weights)
    before = _values(trainable), _values(frozen)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    batch = len(tree.flatten(input_data)[0])
    model.fit(
        input_data,
        training_target,
        batch_size=batch,
        epochs=1,
        shuffle=False,
        verbose=0,
        **(fit_kwargs or {}),
    )
    after = _values(trainable), _values(frozen)
    unchanged = [
        w.path
        for w, b, a in zip(trainable, before[0], after[0])
        if b.shape == a.shape and np.array_equal(b, a)
    ]
    if unchanged:
        raise AssertionError(
            f"{where}: one training step left the trainable weights "
            f"{unchanged} unchanged (no gradient reaches them?)."
        )
    names = set(updated_non_trainable_weights)
    for w, b, a in zip(frozen, before[1], after[1]):
        changed = b.shape != a.shape or not np.array_equal(b, a)
        declared = w.path.split("/")[-1] in names
        if changed != declared:
            raise AssertionError(
                f"{where}: one training step "
                f"{'changed' if changed else 'left unchanged'} the "
                f"non-trainable weight {w.path}; declared "
                f"{'updated' if declared else 'fixed'}."
            )


def _check_saving(model, layer, input_data, expected, tolerance, where):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "layer.keras")
        save_model(model, path)
        loaded = load_model(path)
    restored = loaded if layer is model else loaded.get_layer(layer.name)
    if type(restored) is not type(layer):
        raise AssertionError(
            f"{where}: the loaded model holds a {type(restored).__name__}."
        )
    if _json(restored.get_config()) != _json(layer.get_config()):
        raise AssertionError(
            f"{where}: the loaded layer's config differs:\n"
            f"{_json(restored.get_config())}\n!=\n{_json(layer.get_config())}"
        )
    for kind in ("trainable_weights", "non_trainable_weights"):
        saved = getattr(layer, kind)
        back = getattr(restored, kind)
        # Names, not paths: a sublayer passed to the constructor is built
        # outside the layer's name scope when the file is loaded.
        if [w.name for w in back] != [w.name for w in saved]:
            raise AssertionError(
                f"{where}: the loaded layer's {kind} are "
                f"{[w.path for w in back]}; saved {[w.path for w in saved]}."
            )
        for w, a, b in zip(saved, _values(saved), _values(back)):
            if a.shape != b.shape or not np.array_equal(a, b):
                raise AssertionError(
                    f"{where}: weight {w.path} differs after a .keras "
                    "round trip."
                )
    actual = loaded(input_data)
    # Flattened: a loaded functional model returns a list where the saved
    # one returned the layer's tuple.
    _assert_same(
        [_spec(x) for x in tree.flatten(expected)],
        [_spec(x) for x in tree.flatten(actual)],
        where,
        "loaded model output",
    )
    for a, e in zip(tree.flatten(actual), tree.flatten(expected)):
        np.testing.assert_allclose(
            ops.convert_to_numpy(a),
            ops.convert_to_numpy(e),
            rtol=tolerance,
            atol=tolerance,
            err_msg=f"{where}: loaded model output",
        )
    mask = _first_mask(expected)
    _check_mask(
        actual,
        False if mask is None else ops.convert_to_numpy(mask),
        where,
        "loaded model's output",
    )
