"""`GrowableEmbedding`'s publishing methods: `mark` and `delta` (delta
export, `kmodels.growable.delta`) and `assign` (warm start,
`kmodels.growable.warm_start`)."""

from kmodels.growable import delta
from kmodels.growable import warm_start


class Publishing:
    """The delta-export and warm-start methods of `GrowableEmbedding` (a
    mixin over the layer's table, index and growth state)."""

    # The rows changed since the first mark (`kmodels.growable.delta`).
    _row_clock = None

    def mark(self):
        """Marks the table's state now, for `delta(since=mark)`: returns a
        `kmodels.growable.DeltaMark` (no copy of the table). From the first
        mark on, the rows each step changes and the keys the `key_index`
        adds or evicts are recorded on the host, in time proportional to
        the batch. Marks do not survive loading the table or its index.
        docs/growable_embedding.md ("Delta export") tells more.
        """
        return delta.mark(self)

    def delta(self, since):
        """What changed since `since` (a `mark()` of this table), as a
        `kmodels.growable.TableDelta`: the keys added (and their rows), the
        keys evicted, the rows whose values changed and their values now,
        the capacity; its size follows the rows changed. Without a
        `key_index` the ids are the keys. `kmodels.models.delta_inputs`
        lays it out for a served model's `apply_delta` signature. On JAX,
        in a callback during `fit`, read `self.model` first: it writes
        back the state Keras' trainer holds outside the variables (until
        then `mark`, `delta` and `assign` raise a `RuntimeError`).

        Example:

        ```python
        mark = table.mark()
        model.fit(x, y, callbacks=[kmodels.callbacks.EmbeddingGrowth()])
        change = table.delta(since=mark)
        change.keys_added, change.keys_evicted, change.rows, change.values
        ```
        """
        return delta.delta(self, since)

    def assign(self, keys, vectors):
        """Warm start: writes pretrained `vectors` (float, `(len(keys),
        output_dim)`) into the rows of the distinct `keys` (1-D), outside
        compiled steps; returns the rows (int64, in the order of `keys`).

        Keys get rows through the `key_index` (a growing lookup: a full
        bounded index evicts by its policy, or refuses the batch with a
        `ValueError` when `eviction=None`); without one they are ids,
        checked as a call checks ids (integers, `>= 0`, below
        `max_capacity` and 2**31). The table grows to hold them; their
        optimizer slots restart at their initial values. The rows are then
        ordinary rows (trained, saved, in the next `delta`). The vectors
        must be finite in the table's dtype. A refused call changes
        nothing (neither the table nor its index); an empty one writes
        nothing and returns an empty array.

        Example:

        ```python
        table = kmodels.layers.GrowableEmbedding(
            2, initial_capacity=4, key_index=kmodels.layers.KeyIndex("string"))
        table.assign(["cat", "dog"], np.eye(2))  # array([1, 2])
        ```
        """
        return warm_start.assign(self, keys, vectors)
