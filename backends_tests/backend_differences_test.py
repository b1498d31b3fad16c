"""Pins the backend differences that docs/backends.md records (re-verified
here on every backend, so the page stays true)."""

import keras
import numpy as np
import pytest

BACKEND = keras.backend.backend()
np_ = keras.ops.convert_to_numpy


def test_embedding_out_of_range_id():
    # keras.layers.Embedding(10, 4) on id 15: TF and torch raise, JAX returns
    # NaN silently (its gather fills out-of-bounds rows with NaN).
    layer = keras.layers.Embedding(10, 4)
    ids = np.array([[15]])
    if BACKEND == "jax":
        assert np.all(np.isnan(np_(layer(ids))))
    else:
        expected = {"tensorflow": "InvalidArgumentError", "torch": "IndexError"}
        with pytest.raises(Exception) as info:
            layer(ids)
        assert type(info.value).__name__ == expected[BACKEND]


def test_sparse_crossentropy_label_out_of_range():
    # A label >= number of classes: TF raises InvalidArgumentError, torch
    # IndexError, JAX returns a finite, meaningless loss.
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    labels, logits = np.array([7]), np.zeros((1, 5), "float32")
    if BACKEND == "jax":
        value = float(np_(loss(labels, logits)))
        assert np.isfinite(value)
        # The right value for a valid label would be log(5); JAX's is not it.
        assert abs(value - np.log(5)) > 1.0
    else:
        expected = {"tensorflow": "InvalidArgumentError", "torch": "IndexError"}
        with pytest.raises(Exception) as info:
            loss(labels, logits)
        assert type(info.value).__name__ == expected[BACKEND]


def test_default_compilation():
    # jit_compile="auto": XLA on JAX; TF runs a tf.function graph without XLA
    # on CPU; torch runs eagerly.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    assert model.jit_compile == (BACKEND == "jax")
    assert model.run_eagerly is False


def test_variable_assign_refuses_a_new_shape():
    v = keras.Variable(np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match="shape of the target variable"):
        v.assign(np.zeros((4, 3), "float32"))


def test_optimizer_refuses_a_variable_it_was_not_built_with():
    v = keras.Variable(np.zeros((2, 3), "float32"))
    opt = keras.optimizers.Adam()
    opt.build([v])
    w = keras.Variable(np.zeros((4, 3), "float32"))
    with pytest.raises(ValueError, match="Unknown variable"):
        opt.apply([np.ones((4, 3), "float32")], [w])


def test_built_layer_refuses_new_weights():
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    with pytest.raises(ValueError):
        layer.add_weight(shape=(3,), name="late")
