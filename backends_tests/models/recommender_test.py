"""The growing recommender: tables grow with the key indexes, training
ranks held-out items far above chance."""

import keras
import numpy as np

from examples.growing_recommender import make_stream
from kmodels.callbacks import EmbeddingGrowth
from kmodels.models import recommender
from kmodels.models.recommender import hit_rate_at_k


def test_recommender_grows_and_ranks():
    rng = np.random.default_rng(0)
    stream = make_stream(rng, users=40, items=32, chunks=2, per_chunk=500)
    held_users, held_items = stream[-1][0][400:], stream[-1][1][400:]
    stream[-1] = (stream[-1][0][:400], stream[-1][1][:400])
    model = recommender(embedding_dim=8, initial_capacity=4)
    users = model.get_layer("users")
    items = model.get_layer("items")
    growth = EmbeddingGrowth()
    for user_keys, item_keys in stream:
        u = users.key_index.lookup(user_keys).astype("int32")
        i = items.key_index.lookup(item_keys).astype("int32")
        neg = rng.integers(1, items.key_index.num_rows, len(u)).astype("int32")
        x = {"user": np.concatenate([u, u]), "item": np.concatenate([i, neg])}
        y = np.concatenate([np.ones(len(u)), np.zeros(len(u))])[:, None]
        model.fit(
            x,
            y.astype("float32"),
            batch_size=100,
            epochs=3,
            verbose=0,
            callbacks=[growth],
        )
    # Keys are 10**12-sized; rows are dense, and capacity covers them.
    assert users.capacity >= users.key_index.num_rows
    assert items.capacity >= items.key_index.num_rows
    assert users.capacity < 2 * users.key_index.num_rows
    # One growth per table per fit at most here (4 -> enough rows at once).
    assert growth.growths <= 4
    u = users.key_index.lookup(held_users, grow=False)
    i = items.key_index.lookup(held_items, grow=False)
    known = (u > 0) & (i > 0)  # row 0: keys never seen in training
    u, i = u[known], i[known]
    assert known.sum() > 80
    hit = hit_rate_at_k(model, u, i, items.key_index.num_rows, k=10)
    chance = 10 / (items.key_index.num_rows - 1)
    # 8 taste clusters: a trained model ranks the user's cluster (about 4
    # items of ~32) first; 2x chance is a loose floor for a 6-epoch model.
    assert hit > 2 * chance, (hit, chance)
    assert keras.ops.convert_to_numpy(
        model.predict(
            {"user": u[:4].astype("int32"), "item": i[:4].astype("int32")},
            verbose=0,
        )
    ).shape == (4, 1)
