"""`benchmarks.original.fit_step`: the original (Keras 2) code's train step
is timed as `fit` runs it, on one `tf.data` iterator, not as Keras 2's
`train_on_batch` runs it (a new iterator per call, whose teardown waits at
random for its autotune thread)."""

import numpy as np
import pytest

from benchmarks.original import fit_step

pytestmark = pytest.mark.backend_independent(
    reason="Keras 2 (tf_keras) on TensorFlow, whatever KERAS_BACKEND says"
)


def _model():
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.Dense(3)])
    model.build((None, 4))
    model.compile(optimizer=tf_keras.optimizers.SGD(0.1), loss="mse")
    return model


def test_steps_equal_fit_and_share_one_iterator(monkeypatch):
    from tensorflow.python.data.ops import iterator_ops

    made = []
    init = iterator_ops.OwnedIterator.__init__

    def counted(self, dataset=None, **kwargs):
        # An iterator made from a dataset (a `tf.function` rebuilds the
        # ones it is given from their components).
        if dataset is not None:
            made.append(dataset)
        init(self, dataset=dataset, **kwargs)

    monkeypatch.setattr(iterator_ops.OwnedIterator, "__init__", counted)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype("float32")
    y = rng.normal(size=(8, 3)).astype("float32")

    stepped = _model()
    step = fit_step(stepped, x, y)
    losses = [step() for _ in range(3)]
    assert len(made) == 1

    fitted = _model()
    history = fitted.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    # The same three SGD steps on the same batch, the same weights after
    # (float32, the same operations). The step's loss is Keras 2's running
    # mean since the last metric reset, which `fit` makes at each epoch:
    # the first one is the loss before any step.
    for a, b in zip(stepped.get_weights(), fitted.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(losses[0], history.history["loss"][0], rtol=1e-6)
    trained = stepped.get_weights()
    untrained = _model().get_weights()
    assert max(np.max(np.abs(a - b)) for a, b in zip(trained, untrained)) > 1e-2
