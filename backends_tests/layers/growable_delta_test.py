"""Delta export: `GrowableEmbedding.mark()` / `delta(since=mark)` and the
keyed SavedModel's `apply_delta` signature.

A two-tower model (string user keys in an LRU-bounded index that evicts;
int64 item keys in an unbounded one) trains three rounds after an export
at round 0. Each round's delta is checked against an oracle built from
snapshots of the indexes and tables (keys added and evicted by set
difference of the key maps; changed rows as the rows the round fed, the
rows restarted and the rows of added keys; every other row bitwise
unchanged). The served round-0 export, after applying the three deltas in
a TensorFlow-only process, gives the predictions of a fresh export at
round 3 on old, new, evicted and unknown keys.
"""

import keras
import numpy as np
import pytest

from backends_tests import tensorflow_only
from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.models import delta_inputs
from kmodels.models import export_with_keys
from kmodels.testing.row_sum import initial_rows
from kmodels.testing.row_sum import row_sum_model
from kmodels.testing.row_sum import sgd_oracle

USERS = [f"user-{n}-ü" for n in range(14)]
ITEMS = [10**12 + n for n in range(10)]
ROUNDS = 3

# The TensorFlow-only process, without Keras or kmodels: loads the round-0
# export, applies the deltas (`.npz` files of `delta_inputs`), serves the
# keys; serves them from the round-N export; then applies a delta whose
# row is past the capacity to see the error.
_SERVE = r"""
import json
import sys

for name in ("keras", "kmodels", "keras_hub", "tf_keras", "jax", "torch"):
    sys.modules[name] = None
import numpy as np
import tensorflow as tf

first, last, deltas, users, items = json.load(sys.stdin)


def arguments(signature, path):
    specs = signature.structured_input_signature[1]
    with np.load(path, allow_pickle=True) as saved:
        return {
            k: tf.constant(saved[k], specs[k].dtype)
            for k in saved.files
        }


def serve(model):
    out = model.signatures["serving_default"](
        user=tf.constant(users, tf.string), item=tf.constant(items, tf.int64)
    )
    return out["output_0"].numpy()[:, 0].tolist()


served = tf.saved_model.load(first)
before = serve(served)
apply = served.signatures["apply_delta"]
capacities = [
    {k: int(v) for k, v in apply(**arguments(apply, path)).items()}
    for path in deltas
]
patched = serve(served)
fresh = serve(tf.saved_model.load(last))
bad = arguments(apply, deltas[0])
bad["items_rows"] = tf.constant([10**6], tf.int64)
bad["items_values"] = tf.zeros([1, 4])
try:
    apply(**bad)
    error = ""
except tf.errors.InvalidArgumentError as e:
    error = e.message
print(json.dumps([before, patched, fresh, capacities, error]))
"""


def _two_towers():
    def table(name, seed, index):
        return GrowableEmbedding(
            4,
            initial_capacity=4,
            optimizer=("adam", {"learning_rate": 0.05}),
            embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.5),
            seed=seed,
            key_index=index,
            name=name,
        )

    users = table(
        "users", 1, KeyIndex("string", max_capacity=9, eviction="lru")
    )
    items = table("items", 2, KeyIndex("int64"))
    inputs = {
        "user": keras.Input(shape=(), dtype="int32", name="user"),
        "item": keras.Input(shape=(), dtype="int32", name="item"),
    }
    dot = keras.ops.sum(
        users(inputs["user"]) * items(inputs["item"]), axis=-1, keepdims=True
    )
    model = keras.Model(inputs, dot)
    model.compile(
        optimizer="sgd",
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


def _state(model):
    """Snapshots: each index's key -> row map, each table's values."""
    state = {}
    for name in ("users", "items"):
        layer = model.get_layer(name)
        index = layer.key_index
        keys = index.keys()
        state[name] = (
            dict(zip(keys, range(index.first_row, index.num_rows))),
            keras.ops.convert_to_numpy(layer.embeddings.value).copy(),
        )
    return state


def _round(model, rng, users, items):
    """Trains a round of 3 batches of 8 (user, item) pairs, their keys
    looked up batch by batch where `fit` reads them (so the LRU index,
    8 rows, evicts between batches); returns the rows fed and the
    `EmbeddingGrowth` callback."""
    tables = model.get_layer("users"), model.get_layer("items")
    fed = {"users": set(), "items": set()}
    picks = [
        (rng.choice(len(users), 8), rng.choice(len(items), 8)) for _ in range(3)
    ]

    def batches():
        for u, i in picks:
            x = {
                "user": tables[0].key_index.lookup([users[k] for k in u]),
                "item": tables[1].key_index.lookup([items[k] for k in i]),
            }
            fed["users"].update(x["user"].tolist())
            fed["items"].update(x["item"].tolist())
            y = (u % 2 == i % 2).astype("float32")[:, None]
            yield {k: v.astype("int32") for k, v in x.items()}, y

    growth = EmbeddingGrowth()
    model.fit(
        batches(),
        steps_per_epoch=len(picks),
        epochs=1,
        verbose=0,
        callbacks=[growth],
    )
    return fed, growth


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """Round 0 trained and exported; rounds 1..3 trained on growing key
    sets (new users evict old ones), each with its delta, the snapshots
    before and after it, the rows it fed and restarted; the round-3
    export."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = _two_towers()
    _round(model, rng, USERS[:6], ITEMS[:4])
    folder = tmp_path_factory.mktemp("delta")
    marks = {n: model.get_layer(n).mark() for n in ("users", "items")}
    export_with_keys(model, str(folder / "round_0"))
    history = []
    for k in range(1, ROUNDS + 1):
        before = _state(model)
        fed, growth = _round(model, rng, USERS[: 6 + 3 * k], ITEMS[: 4 + 2 * k])
        deltas = {}
        for name in ("users", "items"):
            deltas[name] = model.get_layer(name).delta(since=marks[name])
            marks[name] = model.get_layer(name).mark()
        resets = {
            name: {
                int(r)
                for entry in growth.reset_log
                if entry["layer"] == name
                for r in entry["rows"]
            }
            for name in ("users", "items")
        }
        history.append((before, _state(model), deltas, fed, resets))
    export_with_keys(model, str(folder / f"round_{ROUNDS}"))
    return model, history, folder


def test_delta_matches_an_oracle_of_each_round(rounds):
    model, history, _ = rounds
    evicted_total = 0
    for before, after, deltas, fed, resets in history:
        for name in ("users", "items"):
            (old_keys, old_table), (new_keys, new_table) = (
                before[name],
                after[name],
            )
            change = deltas[name]
            capacity = len(new_table)
            assert change.capacity == capacity
            added = {k: r for k, r in new_keys.items() if old_keys.get(k) != r}
            assert dict(zip(change.keys_added, change.key_rows)) == added
            assert len(change.keys_added) == len(added)
            assert sorted(change.keys_evicted) == sorted(
                set(old_keys) - set(new_keys)
            )
            evicted_total += len(change.keys_evicted)
            expected = fed[name] | resets[name] | set(added.values())
            expected = sorted(r for r in expected if r < capacity)
            np.testing.assert_array_equal(change.rows, expected)
            np.testing.assert_array_equal(change.values, new_table[expected])
            # Complete: every row outside the delta is bitwise unchanged.
            kept = np.setdiff1d(np.arange(len(old_table)), change.rows)
            np.testing.assert_array_equal(new_table[kept], old_table[kept])
            # Proportional: the delta holds the changed rows only.
            assert change.values.nbytes == len(expected) * 4 * 4
    # The rounds exercised evictions and growth.
    assert evicted_total >= 3
    assert model.get_layer("items").capacity == 16


def test_delta_round_trip_served_equals_a_fresh_export(rounds):
    model, history, folder = rounds
    paths = []
    for k, (_, _, deltas, _, _) in enumerate(history, start=1):
        path = str(folder / f"delta_{k}.npz")
        np.savez(path, **delta_inputs(model, list(deltas.values())))
        paths.append(path)
    # Old, new and evicted users, unknown ones; items old, new, unknown.
    users = USERS[: 6 + 3 * ROUNDS] + ["nobody"]
    users = (users * 2)[:20]
    items = (ITEMS[: 4 + 2 * ROUNDS] + [7]) * 2
    items = items[:20]
    before, patched, fresh, capacities, error = tensorflow_only.run(
        _SERVE,
        [
            str(folder / "round_0"),
            str(folder / f"round_{ROUNDS}"),
            paths,
            users,
            items,
        ],
    )
    np.testing.assert_allclose(patched, fresh, rtol=0, atol=1e-6)
    # The deltas changed the served predictions.
    assert np.abs(np.array(before) - np.array(fresh)).max() > 1e-3
    # The Python pipeline (frozen lookups, then predict) agrees.
    user_index = model.get_layer("users").key_index
    item_index = model.get_layer("items").key_index
    x = {
        "user": user_index.lookup(users, grow=False).astype("int32"),
        "item": item_index.lookup(items, grow=False).astype("int32"),
    }
    assert (x["user"] == 0).sum() > 1  # "nobody" and the evicted users
    predicted = model.predict(x, verbose=0)[:, 0]
    np.testing.assert_allclose(patched, predicted, rtol=0, atol=1e-5)
    assert capacities[-1] == {
        "users_capacity": model.get_layer("users").capacity,
        "items_capacity": model.get_layer("items").capacity,
    }
    assert "apply_delta: table items got a row at or past its capacity" in (
        error
    )


def test_delta_marks_do_not_survive_loading():
    table = GrowableEmbedding(2, initial_capacity=4, optimizer="sgd", seed=3)
    table.build()
    mark = table.mark()
    store = {}
    table.save_own_variables(store)
    table.load_own_variables(store)
    with pytest.raises(ValueError, match="marks do not survive loading"):
        table.delta(since=mark)
    other = GrowableEmbedding(2, initial_capacity=4, seed=3, name="other")
    with pytest.raises(ValueError, match="mark of table .*, not of this"):
        other.delta(since=table.mark())
    with pytest.raises(TypeError, match="expects `since=` a DeltaMark"):
        table.delta(since=3)


def test_delta_inputs_lays_out_the_signature_and_refuses_bad_deltas():
    model = _two_towers()
    users, items = model.get_layer("users"), model.get_layer("items")
    users.build()
    items.build()
    mark = users.mark()
    users.key_index.lookup(["x", "y"])
    users.key_index.lookup(["x"])
    change = users.delta(since=mark)
    arguments = delta_inputs(model, [change])
    assert sorted(arguments) == sorted(
        f"{t}_{name}"
        for t in ("users", "items")
        for name in (
            "rows",
            "values",
            "capacity",
            "keys",
            "key_rows",
            "evicted",
        )
    )
    # "x" and "y" on rows 1 and 2, untrained: in as the rows of keys added.
    np.testing.assert_array_equal(arguments["users_rows"], [1, 2])
    assert arguments["users_keys"].tolist() == [b"x", b"y"]
    assert arguments["users_values"].shape == (2, 4)
    assert int(arguments["users_capacity"]) == 4
    # A table without a delta: empty arrays, its capacity.
    assert arguments["items_rows"].shape == (0,)
    assert arguments["items_values"].shape == (0, 4)
    assert arguments["items_keys"].dtype == np.int64
    assert int(arguments["items_capacity"]) == 4
    change.values = change.values[:, :3]
    with pytest.raises(ValueError, match=r"values of shape \(2, 3\)"):
        delta_inputs(model, [change])
    with pytest.raises(ValueError, match="two deltas of table 'items'"):
        delta_inputs(model, [items.delta(items.mark())] * 2)
    other = GrowableEmbedding(2, name="elsewhere")
    other.build()
    with pytest.raises(ValueError, match="a delta of table 'elsewhere'"):
        delta_inputs(model, [other.delta(other.mark())])
    with pytest.raises(TypeError, match="expects TableDelta objects"):
        delta_inputs(model, [mark])


def test_delta_key_journal_lives_with_the_marks_and_not_past_a_load():
    index = KeyIndex("int64", max_capacity=3, eviction="lru")
    table = GrowableEmbedding(2, initial_capacity=3, key_index=index, seed=3)
    index.lookup([1, 2])
    first = table.mark()
    index.lookup([3])  # evicts 1
    second = table.mark()
    index.lookup([1])  # evicts 2
    change = table.delta(since=first)
    # By hand: 3 took 1's row 1, then 1 came back on 2's row 2. Key 1
    # was held at the mark, but on another row: it is added, not evicted.
    added = dict(zip(change.keys_added, change.key_rows.tolist()))
    assert added == {3: 1, 1: 2} and change.keys_evicted == [2]
    journal = index._journal
    assert len(journal.events) == 4  # two lookups: released, added each
    del first, change
    table.mark()  # trims the events older than the oldest live mark
    assert len(journal.events) == 2
    del second
    index.lookup([4])
    assert journal.events == []  # no live mark: nothing kept
    # Loading the index's state starts a new journal: old marks refused.
    mark = table.mark()
    store = {}
    index.save_own_variables(store)
    index.load_own_variables(store)
    with pytest.raises(ValueError, match="marks do not survive loading"):
        table.delta(since=mark)


def test_delta_of_a_table_without_index_uses_ids_as_keys():
    table = GrowableEmbedding(
        2, initial_capacity=4, optimizer=("sgd", {"learning_rate": 0.5}), seed=3
    )
    model, _ = row_sum_model(table)
    table.build()
    first = keras.ops.convert_to_numpy(table.embeddings.value).copy()
    mark = table.mark()
    # One step on ids 1 and 6: the table grows to 8 rows.
    model.fit(
        np.array([[1], [6]], "int32"),
        np.zeros(2, "float32"),
        batch_size=2,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    assert table.capacity == 8
    change = table.delta(since=mark)
    np.testing.assert_array_equal(change.rows, [1, 6])
    assert change.keys_added == [6] and change.keys_evicted == []
    np.testing.assert_array_equal(change.key_rows, [6])
    now = keras.ops.convert_to_numpy(table.embeddings.value)
    np.testing.assert_array_equal(change.values, now[[1, 6]])
    kept = [0, 2, 3]
    np.testing.assert_array_equal(now[kept], first[kept])
    assert not np.allclose(now[1], first[1])
    assert table.delta(since=table.mark()).rows.size == 0


def test_delta_in_a_callback_mid_fit_holds_the_rows_of_that_batch():
    # On JAX the step holds a grown table padded past its capacity
    # (docs/growable_embedding.md, "Growth on JAX"). A callback that reads
    # `self.model` (which writes the running state back) and takes a delta
    # sees the capacity and the rows trained so far: those of a NumPy SGD
    # oracle of the batches up to that one.
    table = GrowableEmbedding(
        2, initial_capacity=4, optimizer=("sgd", {"learning_rate": 0.5}), seed=3
    )
    model, _ = row_sum_model(table)
    table.build()
    mark = table.mark()
    ids = [6, 2, 13]  # 4 -> 8 rows, no growth, 8 -> 16 (JAX: no recompile)
    targets = np.array([1.0, -1.0, 0.5], "float32")
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.model  # writes the running state back (JAX)
            change = table.delta(since=mark)
            seen.append((table.capacity, change.capacity, change))

    model.fit(
        np.array(ids, "int32")[:, None],
        targets,
        batch_size=1,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth(), Probe()],
    )
    assert [s[0] for s in seen] == [s[1] for s in seen] == [8, 8, 16]
    initial = initial_rows(16, 2, "uniform", 3)
    for n, (_, _, change) in enumerate(seen, 1):
        assert change.rows.tolist() == sorted(ids[:n])
        want = sgd_oracle(
            initial,
            [np.array([i]) for i in ids[:n]],
            [targets[i : i + 1, None] for i in range(n)],
            {},
            0.5,
        )
        # float32 steps against a float64 oracle.
        np.testing.assert_allclose(
            change.values, want[change.rows], atol=1e-6, rtol=0
        )


def test_delta_counts_ttl_expired_keys_as_evicted():
    # TTL (docs/growable_embedding.md, "Expiry by age"): a key absent from
    # `ttl` growing lookups in a row expires at the next one, through the
    # same release as eviction, so a delta lists it with the evicted keys
    # and a new key takes its freed row.
    index = KeyIndex("int64", ttl=1)
    table = GrowableEmbedding(2, initial_capacity=4, key_index=index, seed=3)
    table.build()
    index.lookup([10, 20])  # rows 1, 2; tick 1
    mark = table.mark()
    index.lookup([10])  # tick 2: 20 absent once
    rows = index.lookup([30])  # tick 3: 20 (age 2 > 1) expires first
    # 10 was seen at tick 2: age 1, not expired. 30 takes 20's freed row.
    assert rows.tolist() == [2] and index.keys() == [10, 30]
    change = table.delta(since=mark)
    assert change.keys_evicted == [20]
    assert change.keys_added == [30] and change.key_rows.tolist() == [2]
    assert index.expirations == 1 and index.take_reset_rows().tolist() == [2]
