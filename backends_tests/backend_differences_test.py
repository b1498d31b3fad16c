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


def test_first_fit_on_a_pydataset_with_workers_retrains_prefetched_batches():
    """Keras 3.15: on JAX and torch the first `fit` after `compile` reads
    one batch to build the loss, then restarts a `PyDataset` whose workers'
    queue still holds the batches they prefetched: the epoch trains those
    again and never reaches its last ones. TensorFlow builds inside its
    first step and reads no batch before. (kmodels cannot reach a plain
    Keras model's build; its own models hand Keras their batch specs and
    read nothing first: concurrency_test.py.)"""
    import time

    trained = []

    class Record(keras.layers.Layer):
        def call(self, x):
            if not isinstance(x, keras.KerasTensor) and keras.ops.is_tensor(x):
                try:
                    trained.append(int(np_(x)[0, 0]))
                except Exception:  # traced (the symbolic build): no data
                    pass
            return x

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            if i == 0:
                time.sleep(0.2)  # the other workers fill the queue meanwhile
            return np.full((2, 1), i, "float32"), np.zeros((2, 1), "float32")

    inputs = keras.Input((1,))
    model = keras.Model(inputs, keras.layers.Dense(1)(Record()(inputs)))
    model.compile("sgd", "mse", run_eagerly=True)
    model.fit(Batches(workers=4, max_queue_size=6), shuffle=False, verbose=0)
    assert len(trained) == 12
    if BACKEND == "tensorflow":
        assert trained == list(range(12))
    else:
        # Batches prefetched before the restart trained first (and again).
        assert trained[0] != 0 and trained.count(1) == 2
        assert 11 not in trained
