"""Recommender over a stream where new users and items keep arriving.

    python -m examples.growing_recommender [--quick]

Users and items carry raw int64 keys (like 10**12 + n); `KeyIndex` maps them
to rows as they arrive, `model.fit` trains chunk after chunk of the stream
with `EmbeddingGrowth`, the tables grow, and the held-out hit rate@10 and
the growth log are printed.
"""

import argparse
import time

import keras
import numpy as np

from kmodels.callbacks import EmbeddingGrowth
from kmodels.models import hit_rate_at_k
from kmodels.models import recommender


def make_stream(rng, users, items, chunks, per_chunk, clusters=8):
    """Chunks of (user key, item key) interactions: every user and item has
    a taste cluster; users pick items of their cluster. New users and items
    appear chunk after chunk."""
    user_cluster = rng.integers(0, clusters, users)
    item_cluster = rng.integers(0, clusters, items)
    user_keys = 10**12 + rng.permutation(10**6)[:users]
    item_keys = 7 * 10**12 + rng.permutation(10**6)[:items]
    stream = []
    for c in range(chunks):
        # Population known by chunk c grows linearly.
        n_users = max(clusters, users * (c + 1) // chunks)
        n_items = max(clusters * 4, items * (c + 1) // chunks)
        u = rng.integers(0, n_users, per_chunk)
        pool = [
            np.flatnonzero(item_cluster[:n_items] == k) for k in range(clusters)
        ]
        i = np.array([rng.choice(pool[user_cluster[x]]) for x in u])
        stream.append((user_keys[u], item_keys[i]))
    return stream


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    users, items, chunks, per_chunk, epochs = (
        (300, 120, 4, 1000, 2) if args.quick else (3000, 800, 8, 12000, 4)
    )
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    stream = make_stream(rng, users, items, chunks, per_chunk)
    model = recommender(embedding_dim=16, initial_capacity=16)
    user_index = model.get_layer("users").key_index
    item_index = model.get_layer("items").key_index
    growth = EmbeddingGrowth()
    held_out = []
    for chunk, (user_keys, item_keys) in enumerate(stream):
        u = user_index.lookup(user_keys).astype("int32")
        i = item_index.lookup(item_keys).astype("int32")
        # Hold out 10% of the chunk (rows already known) for ranking.
        test = rng.random(len(u)) < 0.1
        held_out.append((u[test], i[test]))
        u, i = u[~test], i[~test]
        # Whole batches only: a ragged last batch would compile one more
        # step (JAX, TensorFlow XLA) in every fit.
        keep = len(u) // 64 * 64
        u, i = u[:keep], i[:keep]
        negatives = rng.integers(1, item_index.num_rows, len(u)).astype("int32")
        x = {
            "user": np.concatenate([u, u]),
            "item": np.concatenate([i, negatives]),
        }
        y = np.concatenate([np.ones(len(u)), np.zeros(len(u))])[:, None]
        history = model.fit(
            x,
            y.astype("float32"),
            batch_size=128,
            epochs=epochs,
            verbose=0,
            callbacks=[growth],
        )
        print(
            f"chunk {chunk}: users {len(user_index)}, items "
            f"{len(item_index)}, loss {history.history['loss'][-1]:.3f}, "
            f"capacity users {model.get_layer('users').capacity} items "
            f"{model.get_layer('items').capacity}"
        )
    users_ho = np.concatenate([h[0] for h in held_out])
    items_ho = np.concatenate([h[1] for h in held_out])
    hit = hit_rate_at_k(model, users_ho, items_ho, item_index.num_rows)
    chance = 10 / (item_index.num_rows - 1)
    print(f"backend {keras.backend.backend()}")
    print(
        f"held-out hit rate@10: {hit:.3f} over {len(users_ho)} interactions "
        f"(chance {chance:.3f})"
    )
    print(
        f"growth log ({growth.growths} growths, {growth.recompilations} "
        "recompilations):"
    )
    for entry in growth.log:
        print(
            f"  fit step {entry['step']}: {entry['layer']} {entry['from']} -> "
            f"{entry['to']} (max id {entry['max_id']})"
        )
    print(f"time {time.perf_counter() - start:.1f} s")
    return {"hit_rate": hit, "chance": chance, "growth": growth}


if __name__ == "__main__":
    main()
