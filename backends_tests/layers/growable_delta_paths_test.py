"""Delta export records the rows of every compiled training path.

The table records the rows its own sparse update writes, inside the step
(docs/growable_embedding.md, "Delta export"), so `delta()` lists the rows
a `fit` trained with or without `EmbeddingGrowth`, and those of
`train_on_batch`; `predict`, `evaluate` and a training call that computes
no gradient train nothing and record nothing. The oracle is a snapshot of
the table: the changed rows are those whose values differ from it.
"""

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.testing.row_sum import row_sum_model

IDS = np.array([[1], [5], [1], [6]], "int32")
TARGETS = np.array([1.0, -1.0, 0.5, 2.0], "float32")


def _table():
    table = GrowableEmbedding(
        2, initial_capacity=8, optimizer=("sgd", {"learning_rate": 0.5}), seed=3
    )
    model, _ = row_sum_model(table)
    table.build()
    return model, table


def _values(table):
    return np.array(keras.ops.convert_to_numpy(table.embeddings.value))


def _train(model, how):
    if how == "fit":
        model.fit(IDS, TARGETS, batch_size=2, verbose=0, shuffle=False)
    elif how == "fit_with_growth":
        model.fit(
            IDS,
            TARGETS,
            batch_size=2,
            verbose=0,
            shuffle=False,
            callbacks=[EmbeddingGrowth()],
        )
    else:
        model.train_on_batch(IDS[:2], TARGETS[:2])
        model.train_on_batch(IDS[2:], TARGETS[2:])


@pytest.mark.filterwarnings("ignore:GrowableEmbedding.*compiled step")
@pytest.mark.parametrize("how", ["fit", "fit_with_growth", "train_on_batch"])
def test_delta_lists_the_rows_each_training_path_changed(how):
    model, table = _table()
    before = _values(table)
    mark = table.mark()
    _train(model, how)
    now = _values(table)
    changed = np.flatnonzero(np.any(now != before, axis=1))
    np.testing.assert_array_equal(changed, [1, 5, 6])
    change = table.delta(since=mark)
    np.testing.assert_array_equal(change.rows, changed)
    np.testing.assert_array_equal(change.values, now[changed])
    assert change.keys_added == []
    # A later mark sees only what trains after it.
    second = table.mark()
    model.train_on_batch(np.array([[2]], "int32"), np.zeros(1, "float32"))
    np.testing.assert_array_equal(table.delta(since=second).rows, [2])
    np.testing.assert_array_equal(table.delta(since=mark).rows, [1, 2, 5, 6])


def test_delta_records_nothing_for_inference_and_gradient_free_calls():
    model, table = _table()
    model.fit(IDS, TARGETS, batch_size=2, verbose=0)  # compiles every path
    before = _values(table)
    mark = table.mark()
    model.predict(IDS, verbose=0)
    model.predict_on_batch(IDS)
    model.evaluate(IDS, TARGETS, verbose=0)
    table(keras.ops.convert_to_tensor(IDS), training=True)  # no gradient
    np.testing.assert_array_equal(_values(table), before)
    assert table.delta(since=mark).rows.size == 0
