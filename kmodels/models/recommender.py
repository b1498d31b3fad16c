"""A two-tower recommender whose user and item tables grow while it trains."""

import keras
import numpy as np

from kmodels.growable.embedding import GrowableEmbedding
from kmodels.growable.key_index import KeyIndex


def recommender(
    embedding_dim=16,
    initial_capacity=16,
    learning_rate=0.05,
    seed=0,
):
    """Builds a dot-product recommender over growing user and item tables.

    Inputs are `{"user": rows, "item": rows}` (int32, shape `(batch,)`), the
    rows coming from the `KeyIndex` attached to each table
    (`model.get_layer("users").key_index`). The output is the logit of an
    interaction; train with binary cross-entropy on positives and sampled
    negatives, and `callbacks=[kmodels.callbacks.EmbeddingGrowth()]`.

    Args:
        embedding_dim: int. Size of the user and item vectors.
        initial_capacity: int. Rows of each table at build time.
        learning_rate: float. The tables' sparse Adam learning rate.
        seed: int. Row initializer seed.

    Returns:
        A compiled `keras.Model`.
    """
    tables = {}
    inputs = {}
    for name, offset in (("user", 0), ("item", 1)):
        tables[name] = GrowableEmbedding(
            embedding_dim,
            initial_capacity=initial_capacity,
            optimizer=("adam", {"learning_rate": learning_rate}),
            embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.1),
            seed=seed * 2 + offset,
            key_index=KeyIndex("int64"),
            name=f"{name}s",
        )
        inputs[name] = keras.Input(shape=(), dtype="int32", name=name)
    user = tables["user"](inputs["user"])
    item = tables["item"](inputs["item"])
    logits = keras.ops.sum(user * item, axis=-1, keepdims=True)
    model = keras.Model(inputs, logits, name="growing_recommender")
    model.compile(
        optimizer="sgd",
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


def hit_rate_at_k(model, users, items, num_items, k=10):
    """Share of held-out `(user, item)` rows whose item ranks in the user's
    top `k` among rows `1..num_items-1` of the item table."""
    user_table = keras.ops.convert_to_numpy(
        model.get_layer("users").embeddings.value
    )
    item_table = keras.ops.convert_to_numpy(
        model.get_layer("items").embeddings.value
    )
    candidates = item_table[1:num_items]
    scores = user_table[users] @ candidates.T
    rank = (scores > scores[np.arange(len(items)), items - 1][:, None]).sum(1)
    return float(np.mean(rank < k))
