"""Pins what `kmodels.backend.keras_internals` reads from Keras' private API, on the
installed Keras: a release that changes one fails here, by name."""

import keras
import numpy as np

from kmodels.backend import keras_internals

# Kept outside the layer: Keras would track a list of layers as sublayers.
_OUTERMOST = []


class _Probe(keras.layers.Layer):
    """Records the outermost layer of each call."""

    def call(self, x):
        _OUTERMOST.append(keras_internals.outermost_layer())
        return x


def test_outermost_layer_is_the_called_model():
    probe = _Probe()
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(probe(inputs)))
    _OUTERMOST.clear()
    model(np.ones((1, 2), "float32"))
    probe(np.ones((1, 2), "float32"))
    assert _OUTERMOST == [model, probe]
    assert keras_internals.outermost_layer() is None


def test_functional_structure():
    a = keras.Input((2,), name="a")
    b = keras.Input((3,), name="b")
    dense = keras.layers.Dense(2)
    out = dense(a) + dense(keras.layers.Dense(2)(b))
    model = keras.Model({"a": a, "b": b}, out)
    assert keras_internals.inputs_struct(model) == {"a": a, "b": b}
    assert keras_internals.calls_in_graph(model, dense) == 2
    nodes = keras_internals.inbound_nodes(dense)
    assert [node.arguments.args[0] for node in nodes][0] is a
    assert set(map(id, keras_internals.sublayers(model))) >= {id(dense)}
    sequential = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    assert keras_internals.inputs_struct(keras.layers.Dense(1)) is None
    assert keras_internals.calls_in_graph(sequential.layers[0], dense) == 0
