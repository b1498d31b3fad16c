"""Making, calling and reading a layer under test: the steps every check
of `run_layer_test` shares."""

import inspect
import json

import keras
import numpy as np
from keras import ops
from keras import tree

from kmodels.backend import keras_internals

FLOATS = ("float16", "bfloat16", "float32", "float64")


def make_layer(cls, init_kwargs, dtype=None):
    kwargs = {}
    for name, value in init_kwargs.items():
        if isinstance(value, keras.layers.Layer):
            value = type(value).from_config(value.get_config())
        kwargs[name] = value
    if dtype is not None:
        kwargs["dtype"] = dtype
    return cls(**kwargs)


def json_of(value):
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def call_layer(layer, inputs, call_kwargs):
    if isinstance(inputs, dict):
        return layer(**inputs, **call_kwargs)
    return layer(inputs, **call_kwargs)


def dtype_of(x):
    return keras.backend.standardize_dtype(x.dtype)


def symbolic_inputs(input_data):
    return tree.map_structure(
        lambda x: keras.KerasTensor(tuple(np.shape(x)), dtype=dtype_of(x)),
        input_data,
    )


def input_shapes(input_data):
    return tree.map_structure(lambda x: tuple(np.shape(x)), input_data)


def specs(outputs):
    return tree.map_structure(lambda x: (tuple(x.shape), dtype_of(x)), outputs)


def as_tuples(shape):
    return tree.map_shape_structure(tuple, shape)


def assert_same(expected, actual, where, what):
    if expected != actual:
        raise AssertionError(
            f"{where}: {what} {actual} differs from the expected {expected}."
        )


def parameters_of(fn):
    return inspect.signature(fn).parameters


def build_layer(layer, input_data):
    if not isinstance(input_data, dict):
        layer.build(input_shapes(input_data))
        return
    names = parameters_of(layer.build)
    shapes = {
        f"{k}_shape": input_shapes(v)
        for k, v in input_data.items()
        if f"{k}_shape" in names
    }
    if shapes:
        layer.build(**shapes)
    else:
        layer.build(input_shapes(next(iter(input_data.values()))))


def values_of(weights):
    return [np.array(ops.convert_to_numpy(w.value)) for w in weights]


# ------------------------------------------------------------------- masks
def first_mask(outputs):
    return keras_internals.get_keras_mask(tree.flatten(outputs)[0])


def check_mask(outputs, expected_mask, where, what):
    mask = first_mask(outputs)
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


def check_mask_shape(symbolic, expected_mask, where):
    mask = first_mask(symbolic)
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
