"""Recommender over a stream where new users and items keep arriving.

    python -m examples.growing_recommender [--quick] [--stream zipf|uniform]

Users and items carry raw int64 keys (like 10**12 + n); `KeyIndex` maps them
to rows as they arrive (a vectorised lookup), and `model.fit` trains chunk
after chunk of the stream with `EmbeddingGrowth` while the tables grow.

The model scores a (user, candidate item) pair by the dot product of the
candidate's vector with the user's query: the user's own vector plus the
mean of the vectors of the user's recent items (a padded bag of item rows,
0 = padding). The history bag and the candidate share one item table, called
once on both (`items([history, candidate])`, `combiner="mean"`,
`mask_zero=True`), so their gradients are summed before one sparse update.
Both tables train with their own row-sparse Adagrad following the model's
optimizer (`optimizer=None`): `keras.optimizers.Adagrad` with an
exponential-decay learning-rate schedule.

It reports the hit rate@10 on held-out interactions against chance
(10 / number of items) and against the same model built on pre-sized
`keras.layers.Embedding` tables (sized to the final number of users and
items, which a stream does not know in advance), trained the same way: the
same batches, epochs, Adagrad and schedule.

The user table is bounded: its `KeyIndex(max_capacity=..., eviction="lru")`
holds fewer rows than there are users, so a new user takes the row of the
least recently used one, and `EmbeddingGrowth` restarts that row (initial
values, fresh Adagrad accumulator) before the step that first trains it.
The user keys are looked up batch by batch, inside the generator `fit`
reads, so that every eviction falls between two train steps. Held-out
users that were evicted (or never trained) read the reserved row 0. The
pre-sized baseline keeps every user.

The stream (`--stream`): `zipf` (the default) gives users and items
Zipf-like activity, the user or item of rank r drawn with weight
r**-`ZIPF_EXPONENT` (1.0; `--exponent`), the bounded user table half as
many rows as the stream has distinct users, and its index
`min_count=2 * epochs + 1`: an interaction is looked up twice per epoch
(its positive and its negative), so a user gets a row once it has more
than one interaction, and users seen once share row 0. `uniform` makes
every known user and item equally likely, the stream of the figures
before the zipf one (the same stream, bit for bit, with 160 or 1600 user
rows and `min_count=1`). The demo prints the bounded / pre-sized
hit-rate ratio and where the gap is: both models on the held-out users
the bounded table holds, and on the others (evicted or not admitted, row
0). `--eviction lfu` and `--min-count n` try the other policies of
`KeyIndex`.
"""

import argparse
import time

import keras
import numpy as np

from kmodels.callbacks import EmbeddingGrowth
from kmodels.callbacks import LookAheadLimit
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex

BATCH = 128
LEARNING_RATE = 3.0
# Exponent `s` of the zipf stream's activity: the user (item) of rank `r`
# is drawn with weight `r**-s`.
ZIPF_EXPONENT = 1.0


def make_stream(
    rng, users, items, chunks, per_chunk, clusters=8, exponent=None
):
    """Chunks of (user key, item key) interactions: every user and item has
    a taste cluster; users pick items of their cluster. New users and items
    appear chunk after chunk.

    `exponent=None`: every known user and every known item of a cluster is
    equally likely (the uniform stream). A number `s`: Zipf-like activity,
    drawn after the uniform stream's keys and clusters (so both share them):
    every user gets a rank `r` (a random permutation of `1..users`) and
    weight `r**-s`, and so does every item (`1..items`); an event picks a
    known user with probability proportional to its weight, then a known
    item of the user's cluster likewise. Once all users are known, the
    user of rank `r` carries `r**-s / H(users, s)` of the events
    (`H(n, s) = sum(k**-s for k in 1..n)`)."""
    user_cluster = rng.integers(0, clusters, users)
    item_cluster = rng.integers(0, clusters, items)
    user_keys = 10**12 + rng.permutation(10**6)[:users]
    item_keys = 7 * 10**12 + rng.permutation(10**6)[:items]
    if exponent is not None:
        user_weight = (rng.permutation(users) + 1.0) ** -exponent
        item_weight = (rng.permutation(items) + 1.0) ** -exponent
    stream = []
    for c in range(chunks):
        # Population known by chunk c grows linearly.
        n_users = max(clusters, users * (c + 1) // chunks)
        n_items = max(clusters * 4, items * (c + 1) // chunks)
        pool = [
            np.flatnonzero(item_cluster[:n_items] == k) for k in range(clusters)
        ]
        if exponent is None:
            u = rng.integers(0, n_users, per_chunk)
            i = np.array([rng.choice(pool[user_cluster[x]]) for x in u])
        else:
            u, i = _zipf_chunk(
                rng,
                per_chunk,
                user_weight[:n_users],
                item_weight,
                user_cluster,
                pool,
            )
        stream.append((user_keys[u], item_keys[i]))
    return stream


def _zipf_chunk(rng, size, user_weight, item_weight, user_cluster, pool):
    """`size` (user, item) positions: users drawn with probability
    proportional to `user_weight`, each user's item from its cluster's
    `pool` with probability proportional to `item_weight`."""
    u = rng.choice(len(user_weight), size, p=user_weight / user_weight.sum())
    i = np.zeros(size, "int64")
    for k, members in enumerate(pool):
        events = np.flatnonzero(user_cluster[u] == k)
        weight = item_weight[members]
        i[events] = rng.choice(members, len(events), p=weight / weight.sum())
    return u, i


def histories(users, items, recent, length):
    """The padded bag of each user's `length` most recent item rows before
    each interaction (0 = padding), in stream order. `recent` maps a user
    row to its item rows so far; the items of `items` are appended to it
    afterwards only where `items` is not `None`."""
    bags = np.zeros((len(users), length), "int32")
    for n, u in enumerate(users.tolist()):
        seen = recent.get(u, ())[-length:]
        bags[n, : len(seen)] = seen
    if items is not None:
        for u, i in zip(users.tolist(), items.tolist()):
            recent.setdefault(u, []).append(i)
    return bags


def _schedule(steps, learning_rate=LEARNING_RATE):
    return keras.optimizers.schedules.ExponentialDecay(
        learning_rate, decay_steps=steps, decay_rate=0.3
    )


def _score(query, candidate):
    return keras.ops.sum(query * candidate, axis=-1, keepdims=True)


def _inputs(history_length):
    return {
        "user": keras.Input(shape=(), dtype="int32", name="user"),
        "history": keras.Input(
            shape=(history_length,), dtype="int32", name="history"
        ),
        "item": keras.Input(shape=(1,), dtype="int32", name="item"),
    }


def _compile(model, steps, learning_rate=LEARNING_RATE):
    model.compile(
        optimizer=keras.optimizers.Adagrad(_schedule(steps, learning_rate)),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


def growing_model(
    embedding_dim,
    history_length,
    steps,
    user_rows,
    seed=0,
    eviction="lru",
    min_count=1,
    user_index=None,
    learning_rate=LEARNING_RATE,
):
    """User table (at most `user_rows` rows, the users the `eviction`
    policy picks evicted, a user admitted at its `min_count`-th appearance)
    and one item table shared by the history bag and the candidate, both
    growing, both following the model's Adagrad. `user_index`: a
    `KeyIndex` of the user table's own (then `user_rows`, `eviction` and
    `min_count` are not used). `learning_rate`: Adagrad's, decayed to 0.3
    of it over `steps`."""
    init = keras.initializers.RandomNormal(0.0, 0.1)
    if user_index is None:
        user_index = KeyIndex(
            "int64",
            max_capacity=user_rows,
            eviction=eviction,
            min_count=min_count,
        )
    users = GrowableEmbedding(
        embedding_dim,
        initial_capacity=16,
        optimizer=None,
        embeddings_initializer=init,
        seed=2 * seed,
        key_index=user_index,
        name="users",
    )
    items = GrowableEmbedding(
        embedding_dim,
        initial_capacity=16,
        optimizer=None,
        combiner="mean",
        mask_zero=True,
        embeddings_initializer=init,
        seed=2 * seed + 1,
        key_index=KeyIndex("int64"),
        name="items",
    )
    x = _inputs(history_length)
    history, candidate = items([x["history"], x["item"]])
    logits = _score(users(x["user"]) + history, candidate)
    return _compile(
        keras.Model(x, logits, name="growing_recommender"),
        steps,
        learning_rate,
    )


def presized_model(
    num_users,
    num_items,
    embedding_dim,
    history_length,
    steps,
    seed=0,
    learning_rate=LEARNING_RATE,
):
    """The same model on `keras.layers.Embedding` tables sized in advance
    (`num_users`, `num_items` rows, row 0 reserved)."""
    users = keras.layers.Embedding(
        num_users,
        embedding_dim,
        embeddings_initializer=keras.initializers.RandomNormal(
            0.0, 0.1, seed=2 * seed
        ),
        name="users",
    )
    items = keras.layers.Embedding(
        num_items,
        embedding_dim,
        embeddings_initializer=keras.initializers.RandomNormal(
            0.0, 0.1, seed=2 * seed + 1
        ),
        name="items",
    )
    x = _inputs(history_length)
    weight = keras.ops.cast(keras.ops.not_equal(x["history"], 0), "float32")
    total = keras.ops.sum(items(x["history"]) * weight[..., None], axis=1)
    count = keras.ops.maximum(keras.ops.sum(weight, axis=1, keepdims=True), 1)
    candidate = keras.ops.squeeze(items(x["item"]), axis=1)
    logits = _score(users(x["user"]) + total / count, candidate)
    return _compile(
        keras.Model(x, logits, name="presized_recommender"),
        steps,
        learning_rate,
    )


def hit_rate_at_10(model, held_out, num_items):
    """Share of held-out `(user, history, item)` rows whose item ranks in the
    top 10 of the user's scores over item rows `1..num_items-1` (ties count
    against the item)."""
    users, bags, items = held_out
    user_table = keras.ops.convert_to_numpy(
        model.get_layer("users").embeddings.value
    )
    item_table = keras.ops.convert_to_numpy(
        model.get_layer("items").embeddings.value
    )
    weight = (bags != 0).astype("float32")
    count = np.maximum(weight.sum(1, keepdims=True), 1)
    query = user_table[users] + (
        (item_table[bags] * weight[..., None]).sum(1) / count
    )
    scores = query @ item_table[1:num_items].T
    own = scores[np.arange(len(items)), items - 1][:, None]
    return float(np.mean((scores >= own).sum(1) - 1 < 10))


def _hit_or_nan(model, held_out, rows, num_items):
    """`hit_rate_at_10` on the `rows` (a mask) of `held_out`; NaN if
    none."""
    if not rows.any():
        return float("nan")
    return hit_rate_at_10(model, [part[rows] for part in held_out], num_items)


def _batches(rng, users, bags, items, negatives, epochs, batch=BATCH):
    """`epochs` shuffles of the interactions in batches of `batch` rows:
    each interaction with its positive item (label 1) and its negative
    (label 0) in the same batch, so a batch holds at most `batch // 2`
    users. Users are raw keys."""
    half = batch // 2
    batches = []
    for _ in range(epochs):
        order = rng.permutation(len(users))
        for start in range(0, len(order), half):
            n = order[start : start + half]
            x = {
                "user": np.concatenate([users[n], users[n]]),
                "history": np.concatenate([bags[n], bags[n]]),
                "item": np.concatenate([items[n], negatives[n]])[:, None],
            }
            y = np.concatenate([np.ones(len(n)), np.zeros(len(n))])
            batches.append((x, y[:, None].astype("float32")))
    return batches


def _rows(index, batches):
    """`batches` with the user keys looked up in `index` one batch at a
    time, as `fit` consumes them (a generator: a bounded index evicts
    between train steps). `fit` must read it through a `LookAheadLimit`:
    TensorFlow's prefetch would otherwise run the lookups as far ahead of
    training as the machine's load lets it, and evict users whose last
    batches have not trained yet."""
    for x, y in batches:
        x = dict(x, user=index.lookup(x["user"]).astype("int32"))
        yield x, y


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--stream",
        choices=("zipf", "uniform"),
        default="zipf",
        help="zipf: Zipf-like activity of users and items (--exponent); "
        "uniform: every user and item equally active (the stream of the "
        "figures before the Zipf stream)",
    )
    parser.add_argument(
        "--exponent",
        type=float,
        default=ZIPF_EXPONENT,
        help=f"Zipf exponent of the zipf stream (default {ZIPF_EXPONENT})",
    )
    parser.add_argument(
        "--user-rows",
        type=int,
        default=None,
        help="rows of the bounded user table (row 0 reserved); default: "
        "half the distinct users of the zipf stream, 160 (--quick) or "
        "1600 for the uniform one",
    )
    parser.add_argument("--eviction", choices=("lru", "lfu"), default="lru")
    parser.add_argument(
        "--min-count",
        type=int,
        default=None,
        help="appearances a user needs to get a row; default: 2 * epochs + 1 "
        "on the zipf stream (more than one interaction), 1 on the uniform "
        "one",
    )
    args = parser.parse_args(argv)
    if args.exponent < 0:
        parser.error(
            f"--exponent: expected a Zipf exponent >= 0; got {args.exponent}"
        )
    users, items, chunks, per_chunk, epochs, user_rows = (
        (300, 120, 4, 1000, 2, 160)
        if args.quick
        else (3000, 800, 8, 12000, 4, 1600)
    )
    exponent = args.exponent if args.stream == "zipf" else None
    min_count = args.min_count
    if min_count is None:
        # Each interaction is looked up 2 * epochs times (positive and
        # negative, every epoch): admit users at their second interaction.
        min_count = 2 * epochs + 1 if exponent is not None else 1
    dim, length = 16, 8
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    stream = make_stream(
        rng, users, items, chunks, per_chunk, exponent=exponent
    )
    distinct = len(np.unique(np.concatenate([u for u, _ in stream])))
    if args.user_rows is not None:
        user_rows = args.user_rows
    elif exponent is not None:
        # Half as many rows as users, the reserved row 0 included.
        user_rows = distinct // 2
    # Steps of the whole run (whole batches of positives and negatives): the
    # schedule decays over it.
    steps = chunks * epochs * int(0.9 * per_chunk) // 64
    model = growing_model(
        dim,
        length,
        steps,
        user_rows,
        eviction=args.eviction,
        min_count=min_count,
    )
    user_index = model.get_layer("users").key_index
    item_index = model.get_layer("items").key_index
    # The baseline's user rows: every user keeps one.
    all_users = KeyIndex("int64")
    growth = EmbeddingGrowth()
    # Lookups at most 2 batches ahead of the step, on every backend and load.
    pace = LookAheadLimit(max_ahead=2)
    look_ahead = 0
    recent = {}
    batches, held_out, trained = [], [], []
    for chunk, (user_keys, item_keys) in enumerate(stream):
        i = item_index.lookup(item_keys).astype("int32")
        # Hold out 10% of the chunk for ranking; its items do not enter the
        # histories (kept per user key: a row may change user).
        test = rng.random(len(i)) < 0.1
        held_out.append(
            (
                user_keys[test],
                histories(user_keys[test], None, recent, length),
                i[test],
            )
        )
        u, i = user_keys[~test], i[~test]
        h = histories(u, i, recent, length)
        # Whole batches only: a ragged last batch would compile one more
        # step (JAX, TensorFlow XLA) in every fit.
        keep = len(u) // (BATCH // 2) * (BATCH // 2)
        u, i, h = u[:keep], i[:keep], h[:keep]
        negatives = rng.integers(1, item_index.num_rows, len(u)).astype("int32")
        chunk_batches = _batches(rng, u, h, i, negatives, epochs)
        all_users.lookup(u)
        trained.append(u)
        batches.extend(chunk_batches)
        history = model.fit(
            pace(_rows(user_index, chunk_batches)),
            steps_per_epoch=len(chunk_batches),
            shuffle=False,  # shuffled by `_batches`
            verbose=0,
            callbacks=[growth, pace],
        )
        look_ahead = max(look_ahead, pace.max_seen)
        print(
            f"chunk {chunk}: users {len(all_users)} (table holds "
            f"{len(user_index)}, {user_index.evictions} evictions), items "
            f"{len(item_index)}, loss {history.history['loss'][-1]:.3f}, "
            f"capacity users {model.get_layer('users').capacity} items "
            f"{model.get_layer('items').capacity}"
        )
    keys, bags, held_items = (np.concatenate(part) for part in zip(*held_out))
    num_items = item_index.num_rows
    # Evicted, not admitted or never trained held-out users read row 0.
    held = user_index.lookup(keys, grow=False).astype("int32")
    hit = hit_rate_at_10(model, (held, bags, held_items), num_items)
    kept = held != 0
    held_hit = hit_rate_at_10(
        model, (held[kept], bags[kept], held_items[kept]), num_items
    )
    # The same batches and optimizer on tables sized in advance.
    keras.utils.set_random_seed(0)
    baseline = presized_model(all_users.num_rows, num_items, dim, length, steps)
    for x, y in batches:
        x = dict(x, user=all_users.lookup(x["user"]).astype("int32"))
        baseline.train_on_batch(x, y)
    everyone = all_users.lookup(keys, grow=False).astype("int32")
    baseline_hit = hit_rate_at_10(
        baseline, (everyone, bags, held_items), num_items
    )
    # Where the gap is: both models on the held-out users the bounded
    # table still holds, and on the others (row 0, the history alone).
    split = {}
    for part, rows in (("held", kept), ("other", ~kept)):
        split[part] = (
            float(np.mean(rows)),
            _hit_or_nan(model, (held, bags, held_items), rows, num_items),
            _hit_or_nan(
                baseline, (everyone, bags, held_items), rows, num_items
            ),
        )
    # The share of the training interactions that the `user_rows - 1`
    # most active users carry: what a table of `user_rows` rows (row 0
    # reserved) could hold at best, knowing every user's activity.
    all_keys = np.concatenate(trained)
    activity = np.sort(np.unique(all_keys, return_counts=True)[1])[::-1]
    top_share = float(activity[: user_rows - 1].sum() / activity.sum())
    chance = 10 / len(item_index)
    ratio = hit / baseline_hit
    policy = args.eviction.upper() + (
        f", min_count {min_count}" if min_count > 1 else ""
    )
    print(f"backend {keras.backend.backend()}")
    print(
        f"stream {args.stream}"
        + (f" (Zipf exponent {exponent:g})" if exponent is not None else "")
        + f": {distinct} distinct users, {len(item_index)} items"
    )
    print(
        f"held-out hit rate@10 over {len(keys)} interactions: "
        f"growable {hit:.3f}, pre-sized Embedding {baseline_hit:.3f}, "
        f"chance {chance:.3f}"
    )
    print(
        f"bounded users: {len(all_users)} users in {user_rows} rows "
        f"({policy}), "
        f"{user_index.evictions} evictions, {growth.evicted_resets} rows "
        f"restarted, {np.mean(kept):.3f} of held-out users still held "
        f"(their hit rate@10 {held_hit:.3f})"
    )
    print(
        f"bounded / pre-sized hit rate@10: {ratio:.3f} ({hit:.3f} / "
        f"{baseline_hit:.3f}; {user_rows} rows for {distinct} users, "
        f"{args.stream} stream)"
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
    print(
        "where the gap is (share of held-out interactions: bounded / "
        "pre-sized hit rate@10): "
        + ", ".join(
            f"{part} users {share:.3f}: {ours:.3f} / {theirs:.3f}"
            for part, (share, ours, theirs) in split.items()
        )
        + f"; the {user_rows - 1} most active users carry {top_share:.3f} "
        "of the training interactions"
    )
    print(f"time {time.perf_counter() - start:.1f} s")
    return {
        "stream": args.stream,
        "exponent": exponent,
        "distinct_users": distinct,
        "hit_rate": hit,
        "baseline_hit_rate": baseline_hit,
        "ratio": ratio,
        "chance": chance,
        "held_out": len(keys),
        "num_items": len(item_index),
        "num_users": len(all_users),
        "user_rows": user_rows,
        "min_count": min_count,
        "user_capacity": model.get_layer("users").capacity,
        "evictions": user_index.evictions,
        "held_users": float(np.mean(kept)),
        "held_hit_rate": held_hit,
        "split": split,
        "top_share": top_share,
        "growth": growth,
        "look_ahead": look_ahead,
    }


if __name__ == "__main__":
    main()
