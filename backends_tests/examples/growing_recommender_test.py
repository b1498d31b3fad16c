"""`python -m examples.growing_recommender --quick` on the current backend:
its figures, and the pieces they are computed from."""

import re

import keras
import numpy as np

from examples import growing_recommender as demo


def test_quick_run_reports_hit_rates_against_chance_and_embedding(capsys):
    result = demo.main(["--quick"])
    out = capsys.readouterr().out
    assert set(result) == {
        "hit_rate",
        "baseline_hit_rate",
        "chance",
        "held_out",
        "num_items",
        "num_users",
        "user_rows",
        "user_capacity",
        "evictions",
        "held_users",
        "held_hit_rate",
        "growth",
    }
    # The quick stream has 120 items, all of which arrive; chance is 10 of
    # them.
    assert result["num_items"] == 120
    assert result["chance"] == 10 / 120
    for name in ("hit_rate", "baseline_hit_rate", "held_users"):
        rate = result[name]
        assert 0.0 <= rate <= 1.0
        # A whole number of held-out rows.
        hits = rate * result["held_out"]
        assert abs(hits - round(hits)) < 1e-6
    line = re.search(
        r"held-out hit rate@10 over (\d+) interactions: growable (\S+), "
        r"pre-sized Embedding (\S+), chance (\S+)\n",
        out,
    )
    assert line is not None, out
    assert line.group(1) == str(result["held_out"])
    assert line.group(2) == f"{result['hit_rate']:.3f}"
    assert line.group(3) == f"{result['baseline_hit_rate']:.3f}"
    assert line.group(4) == f"{result['chance']:.3f}"
    growth = result["growth"]
    assert (
        f"bounded users: {result['num_users']} users in 160 rows (LRU), "
        f"{result['evictions']} evictions, {growth.evicted_resets} rows "
        f"restarted, {result['held_users']:.3f} of held-out users still "
        f"held (their hit rate@10 {result['held_hit_rate']:.3f})\n"
    ) in out
    assert f"backend {keras.backend.backend()}\n" in out
    # Bounded users: 292 of them through a table of 160 rows (row 0
    # reserved), which never grows past it.
    assert result["user_rows"] == 160
    assert result["num_users"] == 292
    assert result["user_capacity"] == 160
    assert result["evictions"] > 0
    # Every eviction restarted its row once, before the step that first
    # trained the new user (one batch holds at most 64 users, far fewer
    # than the 159 rows: a row given away is never evicted again before
    # the next step).
    assert growth.evicted_resets == result["evictions"]
    # Measured 0.388 on TensorFlow, JAX and torch (pre-sized: 0.669 to
    # 0.688) against chance 0.083: users are equally active, so LRU over
    # 159 rows evicts each of the 292 about 4 times and their vectors
    # barely train (44% of the held-out users were evicted and read row
    # 0), but the history bag still ranks.
    assert result["hit_rate"] > 2 * result["chance"]
    assert result["baseline_hit_rate"] > 3 * result["chance"]
    # Both tables grew during fit: users 16 -> 160 (the index's bound),
    # items 16 -> 128.
    final = {}
    for entry in growth.log:
        final[entry["layer"]] = entry["to"]
    assert final == {"users": 160, "items": 128}


def test_histories_are_the_recent_items_before_each_interaction():
    recent = {}
    users = np.array([1, 2, 1, 1, 1], "int32")
    items = np.array([5, 6, 7, 8, 9], "int32")
    bags = demo.histories(users, items, recent, 3)
    # Interactions of one batch see the items of earlier chunks only.
    np.testing.assert_array_equal(bags, np.zeros((5, 3), "int32"))
    assert recent == {1: [5, 7, 8, 9], 2: [6]}
    bags = demo.histories(np.array([1, 2, 3], "int32"), None, recent, 3)
    np.testing.assert_array_equal(bags, [[7, 8, 9], [6, 0, 0], [0, 0, 0]])
    assert recent == {1: [5, 7, 8, 9], 2: [6]}  # held out: not recorded


def test_hit_rate_counts_items_ranked_in_the_top_10():
    """Against a hand-made table: item row r has score r for the user, so
    rows 11..20 of 20 (num_items=21) are the top 10."""
    dim = 2
    model = demo.presized_model(2, 21, dim, 3, steps=10)
    user = np.zeros((2, dim), "float32")
    user[1] = [1.0, 0.0]
    item = np.zeros((21, dim), "float32")
    item[:, 0] = np.arange(21)
    model.get_layer("users").set_weights([user])
    model.get_layer("items").set_weights([item])
    # Empty histories: the query is the user's vector alone.
    bags = np.zeros((4, 3), "int32")
    held_out = (np.ones(4, "int32"), bags, np.array([20, 11, 10, 1], "int32"))
    assert demo.hit_rate_at_10(model, held_out, 21) == 0.5
    # A history of row 20 adds (20, 0) to the query: the same ranking.
    bags[:, 0] = 20
    assert demo.hit_rate_at_10(model, held_out, 21) == 0.5
