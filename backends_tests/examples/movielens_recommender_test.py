"""`python -m examples.movielens_recommender` on a slice of MovieLens-100k:
the same figures in two runs, growth invisible against pre-sized
`keras.layers.Embedding` tables, the bounded and TTL user tables, and the
baselines against independent counts."""

import keras
import numpy as np
import pytest

from examples import movielens_recommender as demo
from examples import run_all
from kmodels.datasets import movielens

# The first 4,000 ratings (47 users in training, 49 held out), two chunks.
SLICE = dict(chunks=2, epochs=1, dim=8, limit=4000, batch=32)


@pytest.fixture(scope="module")
def figures():
    return demo.run(**SLICE)


def test_two_runs_print_the_same_figures(figures):
    assert demo.run(**SLICE) == figures
    assert (figures["ratings"], figures["users"], figures["held_out"]) == (
        4000,
        47,
        49,
    )


def test_growth_is_invisible_against_presized_tables(figures):
    # The pre-sized tables start from the grown tables' initial rows and
    # train on the same batches: the same ranking.
    assert abs(figures["growable"] - figures["pre-sized"]) <= 1e-4
    assert figures["growths"] >= 1
    # JAX and torch: the same Adagrad updates within float32 rounding.
    # TensorFlow: Keras' Adagrad sums the squares of a row's gradient per
    # lookup on an Embedding's sparse gradient
    # (test_keras_tensorflow_adagrad_squares_each_lookup), not the square
    # of its summed gradient; the tables drift (1.9e-3 measured).
    tolerance = 1e-2 if keras.backend.backend() == "tensorflow" else 1e-5
    assert figures["table_difference"] <= tolerance


def test_bounded_and_ttl_user_tables(figures):
    # Half the 47 users, at least a batch's 16 users beside row 0: 23
    # rows, and users evicted for new ones.
    assert figures["bounded_user_rows"] == 23
    assert figures["bounded_evictions"] > 0
    assert figures["bounded_users_held"] < figures["growable_users_held"]
    # The slice spans less than 30 days: nothing expires, and the TTL
    # table trains as the growable one.
    assert figures["ttl_expirations"] == 0
    assert figures["ttl"] == figures["growable"]
    for name in ("growable", "pre-sized", "bounded", "ttl"):
        assert 0.0 <= figures[name] <= 1.0


def _popularity_hit_rate(limit):
    """Popularity's hit@10, counted from the loader's rows with Python
    dictionaries: each user's last rating held out; items ranked by their
    training counts among the training items the user has not rated, ties
    counted against the held-out item."""
    data = movielens.load_interactions()
    users = data["user"][:limit].tolist()
    items = data["item"][:limit].tolist()
    last = {user: n for n, user in enumerate(users)}
    counts, seen = {}, {}
    for n, (user, item) in enumerate(zip(users, items)):
        if last[user] != n:
            counts[item] = counts.get(item, 0) + 1
            seen.setdefault(user, set()).add(item)
    hits = 0
    for user, n in last.items():
        item = items[n]
        if item not in counts:
            continue
        ahead = sum(
            1
            for other, count in counts.items()
            if other != item
            and other not in seen.get(user, ())
            and count >= counts[item]
        )
        hits += ahead < 10
    return hits / len(last)


def test_popularity_against_independent_counts(figures):
    assert figures["popularity"] == pytest.approx(
        _popularity_hit_rate(SLICE["limit"]), abs=1e-12
    )


@pytest.mark.backend_independent(reason="NumPy ranking, no Keras")
def test_hit_at_10_excludes_seen_items_and_counts_ties_against():
    # Two users, item rows 0 (reserved) to 12.
    scores = np.tile(np.arange(13, dtype="float64"), (2, 1))
    # User 0 holds out row 2: rows 3-12 (10 of them) score higher.
    # Excluding rows 12 and 11 as seen brings it into the first ten.
    assert demo.hit_at_10(scores[:1], np.array([2]), [[]]) == 0.0
    assert demo.hit_at_10(scores[:1], np.array([2]), [[12, 11]]) == 1.0
    # A tie with the tenth counts against the held-out row.
    tied = scores.copy()
    tied[1, 3] = 4.0
    assert demo.hit_at_10(tied[1:], np.array([3]), [[]]) == 1.0
    tied[1, 2] = 4.0
    assert demo.hit_at_10(tied[1:], np.array([2]), [[]]) == 0.0
    # An item unknown to training (row 0) is never a hit.
    assert demo.hit_at_10(scores[:1], np.array([0]), [[]]) == 0.0


def test_keras_tensorflow_adagrad_squares_each_lookup():
    """Pins a Keras behaviour kmodels cannot reach: on TensorFlow an
    `Embedding`'s gradient is sparse (`tf.IndexedSlices`) and Keras'
    Adagrad adds the square of each lookup's gradient to the accumulator,
    where JAX and torch add the square of the row's summed gradient."""
    table = keras.layers.Embedding(
        3, 1, embeddings_initializer="zeros", name="table"
    )
    ids = keras.Input((2,), dtype="int32")
    model = keras.Model(ids, keras.ops.sum(table(ids), axis=1))
    model.compile(
        keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.0),
        loss="mse",
    )
    # Row 1 read twice; the loss (2 * w)^2 - ... at w = 0 gives each lookup
    # the gradient -2 * y = -2, so the row's summed gradient is -4.
    model.train_on_batch(np.array([[1, 1]]), np.array([[1.0]]))
    accumulator = keras.ops.convert_to_numpy(
        model.optimizer.variables[-1].value
    )
    expected = 8.0 if keras.backend.backend() == "tensorflow" else 16.0
    np.testing.assert_allclose(accumulator[1, 0], expected, rtol=1e-6)


def test_the_main_job_runs_the_demo():
    assert run_all.DEMOS["movielens"] == "examples.movielens_recommender"
