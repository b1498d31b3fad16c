"""Next-movie recommendation on MovieLens-100k, replayed in time order.

    python -m examples.movielens_recommender [--quick]

The 100,000 ratings of `kmodels.datasets.movielens` (read from `recbole`'s
wheel: `pip install --no-deps recbole==1.2.1`) arrive in timestamp order,
cut into chunks; one `model.fit` per chunk trains on it with
`EmbeddingGrowth`, while new users and movies keep arriving. Each user's
last rating is held out (leave-last-out), and the demo ranks every movie
the user has not rated yet for it: hit@10 is the share of users whose
held-out movie is among the first ten.

The model is `examples.growing_recommender`'s: the user's vector plus the
mean of the user's 8 most recent movies, dotted with the candidate's
vector, trained on each rating against one random movie with a logistic
loss and the model's Adagrad. The movie table is one `GrowableEmbedding`
shared by the history bag and the candidate. Four user tables train on the
same batches:

- **growable**: a `GrowableEmbedding` that gains a row per new user;
- **pre-sized**: `keras.layers.Embedding` tables sized in advance for every
  user and movie, started from the growable tables' initial rows, so that
  any difference is growth's (a stream does not know its final sizes; this
  is the reference growth must match);
- **bounded (LRU)**: half as many user rows as users, the least recently
  used user evicted for a new one (`KeyIndex(max_capacity=...,
  eviction="lru")`), a user admitted at its second rating (`min_count`);
- **TTL**: a user's row freed once the user has rated nothing for 30 days
  of the stream's own time (`KeyIndex(ttl_seconds=..., clock=...)`, the
  clock reading the timestamps).

Held-out users whose row was evicted or expired read the reserved row 0:
their recent movies alone. The baselines are computed in the same run:
popularity (the most rated movies of the training ratings), recent
popularity (the most rated of the last chunk) and chance. Every figure
comes from fixed seeds and fixed epochs: two runs on one backend print the
same table.
"""

import functools
import time

import keras
import numpy as np

from examples import growing_recommender as recommender
from examples.settings import parse
from kmodels.callbacks import EmbeddingGrowth
from kmodels.callbacks import LookAheadLimit
from kmodels.datasets import movielens
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex

FULL = dict(chunks=10, epochs=6, dim=32, limit=None)
QUICK = dict(chunks=4, epochs=2, dim=16, limit=20_000)
# Rows per batch: 128 ratings, each with its negative.
BATCH = 256
# Adagrad's, decayed to 0.3 of it over the run.
LEARNING_RATE = 6.0
HISTORY = 8
# The TTL table's time-to-live, in seconds of the stream's timestamps.
TTL_SECONDS = 30 * 24 * 3600
VARIANTS = ("growable", "pre-sized", "bounded", "ttl")


class StreamClock:
    """The TTL index's clock: the timestamp of the chunk being trained."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def hit_at_10(scores, held, seen):
    """Share of rows whose held-out item ranks among the first ten of
    `scores` (rows: users; columns: item rows, 0 the reserved one),
    excluding each user's `seen` item rows; ties count against the item."""
    scores = np.array(scores, dtype="float64")
    scores[:, 0] = -np.inf
    for n, rows in enumerate(seen):
        scores[n, rows] = -np.inf
    own = scores[np.arange(len(held)), held]
    above = (scores >= own[:, None]).sum(axis=1) - 1
    return float(np.mean((held != 0) & (above < 10)))


def model_scores(user_table, item_table, users, bags):
    """Every item row's score for each held-out user: the user's row plus
    the mean of its history bag (0 = padding), dotted with the items."""
    weight = (bags != 0).astype("float32")
    count = np.maximum(weight.sum(1, keepdims=True), 1)
    query = user_table[users] + (
        (item_table[bags] * weight[..., None]).sum(1) / count
    )
    return query @ item_table.T


def table(model, name):
    return keras.ops.convert_to_numpy(model.get_layer(name).embeddings.value)


def initial_rows(rows, dim, seed):
    """The first `rows` initial rows of a `growing_model` table drawn with
    `seed` (row 0, the reserved one, zeros): a grown table's rows start
    from these whatever its capacity."""
    twin = GrowableEmbedding(
        dim,
        initial_capacity=rows,
        embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.1),
        seed=seed,
        key_index=KeyIndex("int64"),
    )
    twin.build()
    return keras.ops.convert_to_numpy(twin.embeddings.value)[:rows]


def user_index(variant, distinct_users, epochs, batch, clock):
    if variant == "bounded":
        # A rating is looked up twice per epoch (its positive and its
        # negative): admitted at the second rating. Half as many rows as
        # users, and at least room for a batch's users beside row 0.
        return KeyIndex(
            "int64",
            max_capacity=max(distinct_users // 2, batch // 2 + 1),
            eviction="lru",
            min_count=2 * epochs + 1,
        )
    if variant == "ttl":
        return KeyIndex("int64", ttl_seconds=TTL_SECONDS, clock=clock)
    return KeyIndex("int64")


def run(
    chunks, epochs, dim, limit=None, variants=VARIANTS, seed=0, batch=BATCH
):
    """Replays MovieLens-100k and scores each variant; returns the printed
    figures as a dict.

    Args:
        chunks: `fit` calls, each on the next slice of the stream.
        epochs: epochs of each `fit`.
        dim: the embedding width.
        limit: replay the first this many ratings only (`None`: all).
        variants: which of `VARIANTS` to train (the baselines always run;
            "pre-sized" needs "growable").
        seed: the tables' and the negatives' seed.
        batch: rows per batch (half as many ratings, each with its
            negative).
    """
    data = movielens.load_interactions()
    if limit is not None:
        data = {name: values[:limit] for name, values in data.items()}
    train, test = movielens.leave_last_out(data)
    stream = replay(train, test, chunks, epochs, batch, seed)
    held, seen = stream["held"], stream["seen"]
    num_items = stream["items"].num_rows
    figures = {
        "ratings": len(data["user"]),
        "users": stream["users"],
        "items": len(stream["items"]),
        "held_out": len(held),
    }
    lookup = functools.partial(stream["items"].lookup, grow=False)
    counts = np.bincount(lookup(train["item"]), minlength=num_items)
    last = np.bincount(lookup(stream["last_chunk"]), minlength=num_items)
    figures["popularity"] = hit_at_10(
        np.broadcast_to(counts, (len(held), num_items)), held, seen
    )
    # Ties among the last chunk's counts broken by the overall counts.
    recent_scores = last + counts / (counts.max() + 1.0)
    figures["recent_popularity"] = hit_at_10(
        np.broadcast_to(recent_scores, (len(held), num_items)), held, seen
    )
    figures["chance"] = 10 / (num_items - 1)
    grown = None
    for variant in variants:
        if variant == "pre-sized":
            continue
        keras.utils.set_random_seed(seed)
        clock = StreamClock()
        model = recommender.growing_model(
            dim,
            HISTORY,
            stream["steps"],
            None,
            seed=seed,
            user_index=user_index(
                variant, stream["users"], epochs, batch, clock
            ),
            learning_rate=LEARNING_RATE,
        )
        # The item rows the batches hold, in the model's own index.
        model.get_layer("items").key_index.lookup(stream["items"].keys())
        users = model.get_layer("users").key_index
        growth = EmbeddingGrowth()
        for chunk, end in zip(stream["batches"], stream["ends"]):
            clock.now = end
            pace = LookAheadLimit(max_ahead=2)
            model.fit(
                pace(recommender._rows(users, chunk)),
                steps_per_epoch=len(chunk),
                shuffle=False,  # shuffled by `_batches`
                verbose=0,
                callbacks=[growth, pace],
            )
        figures[variant], rows = evaluate(model, users, stream)
        figures[f"{variant}_user_rows"] = model.get_layer("users").capacity
        figures[f"{variant}_users_held"] = float(np.mean(rows != 0))
        figures[f"{variant}_evictions"] = int(users.evictions)
        figures[f"{variant}_expirations"] = int(users.expirations)
        if variant == "growable":
            grown = model
            figures["growths"] = growth.growths
            figures["recompilations"] = growth.recompilations
    if "pre-sized" in variants:
        figures.update(presized(grown, stream, dim, seed))
    return figures


def replay(train, test, chunks, epochs, batch, seed):
    """The training stream cut into `chunks`, as batches for each chunk's
    `fit` (`epochs` shuffles; each rating with a random item seen so far
    as its negative), and what the evaluation needs: each held-out
    user's item row (`held`, 0 for an item never trained), history bag
    (`bags`) and rated item rows (`seen`)."""
    parts = movielens.time_chunks(train, chunks)
    # Item rows by first appearance in the stream, shared by every variant.
    items = KeyIndex("int64")
    rng = np.random.default_rng(seed)
    half = batch // 2
    batches, recent, ends = [], {}, []
    for part in parts:
        rows = items.lookup(part["item"]).astype("int32")
        bags = recommender.histories(part["user"], rows, recent, HISTORY)
        # Whole batches only: a ragged last batch would compile one more
        # train step (JAX, TensorFlow XLA) in every fit.
        keep = len(rows) // half * half
        negatives = rng.integers(1, items.num_rows, keep).astype("int32")
        batches.append(
            recommender._batches(
                rng,
                part["user"][:keep],
                bags[:keep],
                rows[:keep],
                negatives,
                epochs,
                batch,
            )
        )
        ends.append(float(part["timestamp"][-1]))
    return {
        "items": items,
        "users": len(np.unique(train["user"])),
        "batches": batches,
        "ends": ends,
        "steps": sum(len(b) for b in batches),
        "last_chunk": parts[-1]["item"],
        "test_users": test["user"],
        "held": items.lookup(test["item"], grow=False).astype("int32"),
        "bags": recommender.histories(test["user"], None, recent, HISTORY),
        "seen": [recent.get(user, []) for user in test["user"].tolist()],
    }


def evaluate(model, users, stream):
    """The model's hit@10 on the held-out ratings and the user rows it
    read (0: evicted, expired or never trained)."""
    rows = users.lookup(stream["test_users"], grow=False).astype("int32")
    num_items = stream["items"].num_rows
    scores = model_scores(
        table(model, "users"), table(model, "items"), rows, stream["bags"]
    )
    hit = hit_at_10(scores[:, :num_items], stream["held"], stream["seen"])
    return hit, rows


def presized(grown, stream, dim, seed):
    """The growable model's twin on `keras.layers.Embedding` tables sized
    for every user and item, started from the same initial rows and
    trained on the same batches; its hit@10 and how far its tables end
    from the grown ones."""
    users = grown.get_layer("users").key_index
    num_users, num_items = users.num_rows, stream["items"].num_rows
    keras.utils.set_random_seed(seed)
    model = recommender.presized_model(
        num_users,
        num_items,
        dim,
        HISTORY,
        stream["steps"],
        seed=seed,
        learning_rate=LEARNING_RATE,
    )
    model.get_layer("users").set_weights(
        [initial_rows(num_users, dim, 2 * seed)]
    )
    model.get_layer("items").set_weights(
        [initial_rows(num_items, dim, 2 * seed + 1)]
    )
    for chunk in stream["batches"]:
        model.fit(
            recommender._rows(users, chunk),
            steps_per_epoch=len(chunk),
            shuffle=False,
            verbose=0,
        )
    difference = max(
        np.max(np.abs(table(grown, name)[: len(ours)] - ours))
        for name in ("users", "items")
        for ours in [table(model, name)]
    )
    return {
        "pre-sized": evaluate(model, users, stream)[0],
        "table_difference": float(difference),
    }


def main(argv=None):
    settings = parse(__doc__, argv, FULL, QUICK)
    start = time.perf_counter()
    f = run(**settings)
    print(
        f"   MovieLens-100k: {f['ratings']} ratings, {f['users']} users, "
        f"{f['items']} movies in {settings['chunks']} chunks x "
        f"{settings['epochs']} epochs; {f['held_out']} held out (each "
        "user's last)"
    )
    print(
        f"   hit@10  growable {f['growable']:.4f}   pre-sized Embedding "
        f"{f['pre-sized']:.4f}   (tables {f['table_difference']:.1e} apart; "
        f"{f['growths']} growths, {f['recompilations']} recompilations)"
    )
    for variant, what, freed in (
        ("bounded", "bounded LRU", "evictions"),
        ("ttl", "TTL 30 days", "expirations"),
    ):
        print(
            f"   hit@10  {what} {f[variant]:.4f}   ({f[variant + '_user_rows']}"
            f" user rows, {f[variant + '_' + freed]} {freed}, "
            f"{f[variant + '_users_held']:.3f} of held-out users held)"
        )
    print(
        f"   hit@10  popularity {f['popularity']:.4f}   recent popularity "
        f"{f['recent_popularity']:.4f}   chance {f['chance']:.4f}"
    )
    print(f"   growable / popularity {f['growable'] / f['popularity']:.2f}")
    print(f"   ({time.perf_counter() - start:.0f} s)", flush=True)
    return f


if __name__ == "__main__":
    main()
