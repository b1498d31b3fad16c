"""`masked_loss` when a replica, or the whole global batch, has no token.

`masked_loss` divides by the weighted real tokens of the global batch
(`kmodels.backend.replicas`); a replica whose slice is all padding must
contribute 0 (not NaN) and a global batch without tokens must give loss 0
and leave the weights where they are.

TensorFlow: `tf.distribute.MirroredStrategy` over 4 virtual CPU replicas.
JAX: `keras.distribution.DataParallel` over 4 virtual devices. torch: no
`keras.distribution` data parallelism (see `data_parallel_test.py`), fit
under `DataParallel` runs on one device: the same checks run there.
One SGD step on a global batch of 8 (2 rows per replica) is compared with
one device.
"""

import contextlib

import keras
import numpy as np
import pytest

from backends_tests.distributed.mirrored_strategy_test import _strategy
from kmodels.seq2seq import masked_loss

BACKEND = keras.backend.backend()
VOCAB, T, BATCH = 20, 4, 8
# SGD(0.5), one step, float32 gradients all-reduced in another order than
# on one device (measured below 1e-7).
ATOL = 1e-6


def _scope(device_count, distributed):
    if not distributed:
        return contextlib.nullcontext()
    if BACKEND == "tensorflow":
        return _strategy(device_count).scope()
    if BACKEND == "torch":
        names = [f"cpu:{i}" for i in range(device_count)]
        return keras.distribution.DataParallel(devices=names).scope()
    return keras.distribution.DataParallel().scope()


def _step(device_count, distributed, y, sample_weight=None):
    keras.utils.clear_session()
    keras.utils.set_random_seed(5)
    x = np.random.default_rng(5).integers(1, VOCAB, (BATCH, T))
    with _scope(device_count, distributed):
        model = keras.Sequential(
            [
                keras.Input((T,), dtype="int32"),
                keras.layers.Embedding(VOCAB, 4),
                keras.layers.Dense(VOCAB),
            ]
        )
        model.compile(keras.optimizers.SGD(0.5), loss=masked_loss)
        before = [np.array(w) for w in model.get_weights()]
        history = model.fit(
            x,
            y,
            sample_weight=sample_weight,
            batch_size=BATCH,
            shuffle=False,
            verbose=0,
        )
    if distributed and BACKEND == "tensorflow":
        replicas = model.distribute_strategy.num_replicas_in_sync
        assert replicas == device_count
    return before, model.get_weights(), history.history["loss"][0]


def _labels():
    y = np.random.default_rng(6).integers(1, VOCAB, (BATCH, T))
    y[:2] = 0  # the first replica's slice: no token at all
    y[4, 1:] = 0
    return y


@pytest.mark.parametrize("weighted", [False, True])
def test_replica_without_tokens_matches_one_device(device_count, weighted):
    y = _labels()
    w = None
    if weighted:
        # The second replica's tokens all weighted 0 as well.
        w = np.array([1, 1, 0, 0, 2, 0.5, 1, 3], "float32")
    before, one, loss_one = _step(device_count, False, y, w)
    _, many, loss_many = _step(device_count, True, y, w)
    assert np.isfinite(loss_many)
    np.testing.assert_allclose(loss_many, loss_one, rtol=1e-6)
    moved = max(np.abs(a - b).max() for a, b in zip(one, before))
    assert moved > 1e-2
    for a, b in zip(many, one):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, atol=ATOL)


def test_global_batch_without_tokens_changes_nothing(device_count):
    before, after, loss = _step(
        device_count, True, np.zeros((BATCH, T), "int32")
    )
    assert loss == 0.0
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
