"""An embedding table that grows while the model trains."""

import random

import keras
import numpy as np
from keras import ops

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_float
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.backend import growth as growth_backend
from kmodels.backend import keras_internals
from kmodels.contracts.checks import check_bag_weights
from kmodels.contracts.checks import check_growable_ids
from kmodels.contracts.checks import guarded_call
from kmodels.growable import bags
from kmodels.growable import delta
from kmodels.growable import embedding_state
from kmodels.growable import lookup
from kmodels.growable import optimizers
from kmodels.growable import sizing
from kmodels.growable import slots
from kmodels.growable.initializer import MAX_SEED
from kmodels.growable.initializer import RowInitializer
from kmodels.growable.key_index import KeyIndex
from kmodels.growable.publishing import Publishing

_UNSEEN = ("zeros", "oov", "error")


@keras.saving.register_keras_serializable(package="kmodels")
class GrowableEmbedding(Publishing, keras.layers.Layer):
    """An embedding table that gains rows while the model trains.

    Ids at or past the capacity make the table grow between train steps,
    before the step that uses them (`model.fit` needs
    `callbacks=[kmodels.callbacks.EmbeddingGrowth()]`; eager training calls
    grow by themselves). Growth is geometric and invisible: row `i` starts
    from values that depend only on `(seed, i)`. The table trains with its
    own row-sparse optimizer (`kmodels.growable.optimizers`), only on the
    rows of the batch. At inference ids past the capacity are "unseen".
    See `docs/growable_embedding.md` for growth, the optimizers, bags,
    bounded key indexes, sharding and the saved state.

    Args:
        output_dim: int. Size of each embedding vector.
        initial_capacity: int. Rows at build time (rounded up to a multiple
            of the shards when the rows are sharded).
        growth_factor: float > 1. Capacity multiplier at each growth.
        max_capacity: int or `None`. Growth past it raises a `ValueError`.
        embeddings_initializer: `"uniform"` (default, in `[-0.05, 0.05]`),
            `"normal"` (stddev 0.05), `"zeros"`, or a
            `keras.initializers.RandomUniform` / `RandomNormal` / `Zeros`;
            drawn row by row from `seed`.
        optimizer: the table's sparse optimizer: a `SparseSGD`,
            `SparseAdagrad` or `SparseAdam`; their kind, `"adam"` (default),
            `"adagrad"`, `"sgd"`; a `(kind, hyperparameters)` pair; a
            `keras.optimizers.SGD` / `Adagrad` / `Adam`; or `None`: follow
            the model's optimizer, read when `fit` starts.
        unseen: `"zeros"`, `"oov"` or `"error"`: what inference returns for
            ids past the capacity.
        oov_id: int or `None`. The reserved row used when `unseen="oov"`;
            must be below `initial_capacity`.
        mask_zero: bool. Whether id 0 is padding (`compute_mask` returns
            `ids != 0`, as `keras.layers.Embedding`).
        seed: int in `[0, 2**63)` or `None` (drawn from Python's `random`,
            as Keras' initializers do, and kept in the config).
        key_index: optional `kmodels.layers.KeyIndex` mapping raw keys to
            rows, saved with the layer; a bounded one bounds the table.
        combiner: `None` (one vector per id), `"sum"`, `"mean"` or
            `"sqrtn"`: combine each bag (last axis of the ids) into one
            vector.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: integer tensor of ids, any shape (with a `combiner`:
            padded bags `(batch, ..., bag)`); or a list of such tensors,
            features that share the table (one output per feature).
        weights: optional float tensor of the shape of `inputs` (a list
            like `inputs`, entries may be `None`), one weight per id of a
            bag; needs a `combiner`.
        training: bool. Growth and sparse updates happen only in training.

    Example:

    ```python
    embedding = kmodels.layers.GrowableEmbedding(3, initial_capacity=2)
    ids = keras.Input(shape=(None,), dtype="int32")
    outputs = keras.ops.sum(embedding(ids) ** 2, axis=-1)
    model = keras.Model(ids, outputs)
    model.compile(optimizer="sgd", loss="mse")
    x = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    model.fit(x, np.zeros((2, 4)), callbacks=[
        kmodels.callbacks.EmbeddingGrowth()])
    embedding.capacity  # 8
    ```

    References:
        - TensorFlow Recommenders-Addons `dynamic_embedding`; TorchRec
          managed collision modules (growth and remapping between steps).
    """

    def __init__(
        self,
        output_dim,
        initial_capacity=1024,
        growth_factor=2.0,
        max_capacity=None,
        embeddings_initializer="uniform",
        optimizer="adam",
        unseen="zeros",
        oov_id=None,
        mask_zero=False,
        seed=None,
        key_index=None,
        combiner=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = "GrowableEmbedding"
        output_dim = check_int(output_dim, "output_dim", owner)
        initial_capacity = check_int(
            initial_capacity, "initial_capacity", owner
        )
        growth_factor = check_float(
            growth_factor, "growth_factor", owner, 1, exclusive_minimum=True
        )
        max_capacity = check_optional_int(max_capacity, "max_capacity", owner)
        if max_capacity is not None and max_capacity < initial_capacity:
            raise ValueError(
                f"{owner}: `max_capacity` must be >= initial_capacity="
                f"{initial_capacity}; got {max_capacity}."
            )
        unseen = check_choice(unseen, "unseen", owner, _UNSEEN)
        oov_id = check_optional_int(oov_id, "oov_id", owner, minimum=0)
        if unseen == "oov" and (oov_id is None or oov_id >= initial_capacity):
            raise ValueError(
                'GrowableEmbedding: unseen="oov" needs an `oov_id` in [0, '
                f"initial_capacity={initial_capacity}); got oov_id={oov_id}."
            )
        mask_zero = check_bool(mask_zero, "mask_zero", owner)
        seed = check_optional_int(seed, "seed", owner, 0, MAX_SEED)
        if key_index is not None and not isinstance(key_index, KeyIndex):
            raise ValueError(
                f"{owner}: `key_index` must be a kmodels.layers.KeyIndex or "
                f"None; got {type(key_index).__name__}."
            )
        if combiner is not None:
            combiner = check_choice(combiner, "combiner", owner, bags.COMBINERS)
        table_optimizer = optimizers.get(optimizer)
        if seed is None:
            # As Keras' initializers do (`make_default_seed`): from Python's
            # `random`, which `keras.utils.set_random_seed` seeds. Drawn
            # before `keras.initializers.get`, which may draw too.
            seed = random.randint(1, int(1e9))
        self.output_dim = output_dim
        self.initial_capacity = initial_capacity
        self.growth_factor = growth_factor
        self.max_capacity = max_capacity
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
        )
        self._row_initializer = RowInitializer(self.embeddings_initializer)
        self.optimizer = table_optimizer
        # `optimizer=None`: the model optimizer's rule, read when fit
        # starts (`follow_optimizer`).
        self._followed = None
        # Rows of a slot (by name) grown or loaded before the followed rule
        # was known: they get the rule's initial value when it is.
        self._unset_from = {}
        self.unseen = unseen
        self.oov_id = oov_id
        self.mask_zero = mask_zero
        self.seed = seed
        self.key_index = key_index
        self.check_key_index()
        self.combiner = combiner
        self.supports_masking = self.mask_zero
        # Set by `EmbeddingGrowth` while it guards `fit`: every batch of a
        # compiled step has been checked and fitted beforehand.
        self.managed_growth = False
        self.growth_log = []
        self._warned_unmanaged = False
        self._warned_float16 = False

    def build(self, input_shape=None):
        if self.built:
            return
        trainable = growth_backend.table_is_trainable()
        # Sharded by rows (`keras.distribution`, JAX), the capacity must be
        # a multiple of the shards: JAX refuses to split 6 rows over 4.
        shards = growth_backend.planned_row_shards(
            self, "embeddings", (self.initial_capacity, self.output_dim)
        )
        capacity = sizing.round_up(self.initial_capacity, shards)
        self.embeddings = self.add_weight(
            shape=(capacity, self.output_dim),
            initializer=lambda shape, dtype: ops.convert_to_tensor(
                self._initial_rows(0, shape[0]), dtype=dtype
            ),
            name="embeddings",
            trainable=trainable,
            overwrite_with_gradient=trainable,
            # Read in float32 under a mixed policy (as keras' Embedding):
            # the sparse update writes float32 rows back, and `call` casts
            # the looked-up rows to the compute dtype.
            autocast=False,
        )
        # `optimizer=None`: every slot a followed rule may need, with no
        # rows until `follow_optimizer` knows the rule (the variables must
        # exist before the model's optimizer is built, JAX tracks them).
        rows = 0 if self.optimizer is None else capacity
        self.slot_variables = [
            self.add_weight(
                shape=(rows, self.output_dim),
                initializer=keras.initializers.Constant(
                    slots.initial_value(self, name) or 0.0
                ),
                name=name,
                trainable=trainable,
                overwrite_with_gradient=trainable,
                autocast=False,
            )
            for name in slots.slot_names(self)
        ]
        # The optimizer's step, and the handle through which every backend's
        # autodiff reaches the sparse update: its "gradient" is step + 1.
        for variable in [self.embeddings, *self.slot_variables]:
            growth_backend.make_resizable(variable)
        self.step = self.add_weight(
            shape=(),
            initializer="zeros",
            name="step",
            trainable=True,
            overwrite_with_gradient=True,
            autocast=False,
            # Under tf.distribute.MirroredStrategy Keras overwrites it in
            # each replica; every replica holds the same step + 1, and
            # replica 0's is written to all (as optimizer.iterations).
            aggregation="only_first_replica",
        )
        # Delta export (`kmodels.growable.delta`): per row, the step after
        # the last sparse update that wrote it (0: never). Written by the
        # update itself, with the slots, so every compiled path records
        # the rows it trains. Saved with the table (marks still do not
        # survive loading).
        self.trained_at = self.add_weight(
            shape=(capacity, 1),
            initializer="zeros",
            name="trained_at",
            dtype="float32",
            trainable=trainable,
            overwrite_with_gradient=trainable,
            autocast=False,
        )
        growth_backend.make_resizable(self.trained_at)
        self.built = True

    # ------------------------------------------------------------- optimizer
    @property
    def table_optimizer(self):
        """The `SparseOptimizer` the table trains with: `optimizer`, or with
        `optimizer=None` the model optimizer's as read by
        `follow_optimizer` (`None` before)."""
        if self.optimizer is not None:
            return self.optimizer
        return self._followed

    @property
    def trained_slots(self):
        """The slot variables the sparse update reads and writes, in the
        order of its rule (a subset of `slot_variables` with
        `optimizer=None`)."""
        rule = self.table_optimizer
        if rule is None:
            return []
        named = dict(zip(slots.slot_names(self), self.slot_variables))
        return [named[name] for name in rule.slot_names]

    @property
    def updated_slots(self):
        """What the sparse update writes besides the table, per row:
        `trained_slots`, then `trained_at` (the step of each row's last
        update, the record `delta()` reads)."""
        return [*self.trained_slots, self.trained_at]

    def follow_optimizer(self, optimizer):
        """With `optimizer=None`, makes the table train with the rule of the
        Keras `optimizer` (the model's, read through a
        `LossScaleOptimizer`): same kind, hyperparameters and schedule.
        `EmbeddingGrowth` calls it when `fit` starts; call it yourself
        before a custom training loop. The rule's slots keep their rows
        when the table holds that rule's state (a later `fit`, a loaded
        model); otherwise they and the step start fresh. Does nothing for a
        table with its own optimizer.

        Returns:
            bool: whether the rule changed (a compiled step traced before
            must be traced again).

        Raises:
            ValueError: another optimizer (FTRL, Lion, ...), or settings
                the sparse rule does not apply (weight decay, clipping).

        Example:

        ```python
        table = kmodels.layers.GrowableEmbedding(8, optimizer=None)
        table.follow_optimizer(keras.optimizers.Adagrad(0.05))  # True
        table.table_optimizer.kind  # "adagrad"
        ```
        """
        if self.optimizer is not None:
            return False
        inner = getattr(optimizer, "inner_optimizer", None)
        rule = optimizers.from_keras_optimizer(
            optimizer if inner is None else inner,
            f"GrowableEmbedding '{self.name}' has optimizer=None: it follows "
            "the model's optimizer, which",
        )
        if not self.built:
            self.build()
        return slots.follow(self, rule)

    # ------------------------------------------------------------------ rows
    def _initial_rows(self, start, stop):
        return self._initial_rows_at(np.arange(start, stop))

    def _initial_rows_at(self, rows):
        """Initial values of the integer array of `rows`: those row `r` had
        when the table was built or grew to hold it."""
        values = self._row_initializer(self.seed, rows, self.output_dim)
        if self.key_index is not None:
            # The rows the index reserves (its `oov_row`, padding) hold no
            # key: they start at zeros, so that an unknown key reads a
            # neutral vector, not a random one.
            values[np.asarray(rows) < self.key_index.first_row] = 0
        return values.astype(self.variable_dtype)

    def reset_rows(self, rows):
        """Restarts `rows` as if new: initial values and fresh optimizer
        slots; other rows, and the step, are left as they are.

        A bounded `KeyIndex` gives the row of an evicted key to a new key,
        which must not inherit the old key's training. `EmbeddingGrowth`
        does this inside `fit`, before every step, for the rows
        `key_index.take_reset_rows()` lists; call it yourself between the
        steps of a custom training loop, never inside a compiled step.

        Args:
            rows: integers in `[0, capacity)` (a list or a 1-D NumPy
                array); repeats are reset once.

        Returns:
            The rows reset, sorted and unique, as an int64 NumPy array.
        """
        where = f"GrowableEmbedding '{self.name}'.reset_rows"
        array = sizing.rows_array(where, rows)
        if not self.built:
            self.build()
        rows = np.unique(array.astype(np.int64))
        if not rows.size:
            return rows
        sizing.check_rows_in_range(where, rows, self.capacity)
        growth_backend.write_rows(
            self.embeddings, rows, self._initial_rows_at(rows)
        )
        slots.reset_rows(self, rows)
        delta.stamp_rows(self, rows)
        return rows

    # -------------------------------------------------------------- capacity
    @property
    def row_limit(self):
        """Most rows the table may hold: `max_capacity`, or, when that is
        `None`, the `max_capacity` of a bounded `key_index`; `None` when
        unbounded."""
        if self.max_capacity is not None:
            return self.max_capacity
        return getattr(self.key_index, "max_capacity", None)

    def check_key_index(self):
        """Checks that the table can hold every row its `key_index` hands
        out (a bounded index needs `max_capacity` `None` or `>=` its bound,
        and `initial_capacity <=` it); raises a `ValueError` otherwise."""
        sizing.check_key_index(self)

    @property
    def capacity(self):
        """Number of rows the table holds now (before `build`: the
        `initial_capacity`, which `build` rounds up to `row_multiple`)."""
        if not self.built:
            return self.initial_capacity
        return int(self.embeddings.shape[0])

    @property
    def row_multiple(self):
        """The capacity is always a multiple of this: the number of shards
        of the table's rows under `keras.distribution` (JAX; 1 otherwise)."""
        if not self.built:
            return 1
        return growth_backend.row_shards(self.embeddings)

    def check_ids(self, ids):
        """Validates concrete ids and returns them as a NumPy integer array.
        Raises `TypeError` for non-integer ids and `ValueError` for
        negative ids or ids past `max_capacity`."""
        return sizing.checked_ids(self, ids)

    def required_capacity(self, max_id):
        """The capacity growth picks for ids up to `max_id`: the current one
        times the smallest power of `growth_factor` that fits, capped at
        `max_capacity`, rounded up to a multiple of `row_multiple`."""
        return sizing.required_capacity(self, max_id)

    def ensure_capacity(self, ids):
        """Grows the table (eagerly, between steps) so that the concrete
        `ids` fit; returns the new capacity."""
        return self._fit_checked_ids(self.check_ids(ids))

    def _fit_checked_ids(self, ids):
        if ids.size:
            target = self.required_capacity(int(ids.max()))
            if target > self.capacity:
                self.grow_to(target)
        return self.capacity

    def grow_to(self, capacity):
        """Grows the table to `capacity` rows (rounded up to `row_multiple`)
        outside compiled steps: old rows keep their values and slots, new
        rows start from the row initializer with fresh slots; a sharded
        table stays sharded."""
        if not self.built:
            self.build()
        old = self.capacity
        multiple = self.row_multiple
        capacity = sizing.round_up(int(capacity), multiple)
        if capacity <= old:
            return
        limit = self.row_limit
        if limit is not None and capacity > sizing.round_up(limit, multiple):
            raise ValueError(
                f"GrowableEmbedding '{self.name}' cannot grow to {capacity} "
                f"rows: max_capacity={limit}."
            )
        # Under EmbeddingGrowth: through the table's reserve.
        if not growth_backend.grow_in_place(self, capacity):
            growth_backend.append_rows(
                self.embeddings, self._initial_rows(old, capacity)
            )
            slots.append_rows(self, old, capacity)
            growth_backend.append_rows(
                self.trained_at, np.zeros((capacity - old, 1), "float32")
            )
        self.growth_log.append({"from": old, "to": capacity})

    def fresh_rows(self, variable, start, stop):
        """The values rows `start..stop-1` of `variable` (the table, a
        slot in use or `trained_at`) hold when the table grows to them:
        the row initializer's, the slot's initial value, zeros. A NumPy
        array. Under `EmbeddingGrowth` a table's reserve holds these
        values (JAX: the compiled step's state; torch: the variables'
        buffers), so a growth within it copies no row.

        Example:

        ```python
        table = kmodels.layers.GrowableEmbedding(3, initial_capacity=2)
        table.build()
        table.fresh_rows(table.trained_at, 2, 4)  # zeros, shape (2, 1)
        ```
        """
        if variable is self.embeddings:
            return self._initial_rows(start, stop)
        if variable is self.trained_at:
            return np.zeros((stop - start, 1), "float32")
        for name, slot in slots.live_slots(self):
            if slot is variable:
                return slots.fresh_rows(self, name, start, stop, slot.dtype)
        raise ValueError(
            f"GrowableEmbedding '{self.name}' has no rows in variable "
            f"'{variable.path}'."
        )

    @property
    def growths(self):
        """Number of growths since construction (or load)."""
        return len(self.growth_log)

    # ------------------------------------------------------------------ call
    # Its own rule (and warning) for compiled steps that kmodels did not
    # check: unseen ids get zero vectors, nothing turns NaN.
    _warns_when_unchecked = False

    def _repeated_call_error(self, how):
        # `kmodels.contracts` refuses to train a model that calls this
        # layer more than once: each call runs the sparse update (on JAX,
        # each adds its own updated table to the step).
        return lookup.repeated_call_error(self.name, how)

    def __call__(self, *args, **kwargs):
        # The structure (bags, weights, several features) is checked on
        # symbolic and concrete calls alike, with the same message.
        inputs = args[0] if args else kwargs.get("inputs")
        weights = args[1] if len(args) > 1 else kwargs.get("weights")
        self._features(inputs, weights)
        # Concrete inputs are checked before Keras converts them (JAX casts
        # int64 NumPy ids to int32, wrapping): kmodels.contracts.
        return guarded_call(self, super().__call__, args, kwargs)

    def _check_call_arguments(self, arguments, training):
        inputs = arguments.get("inputs")
        if inputs is not None:
            # The bag weights' structure and shape too: raised inside a
            # compiled JAX step, the error would leave the model's
            # variables without values.
            features, weights, _ = self._features(
                inputs, arguments.get("weights")
            )
            for ids, w in zip(features, weights):
                check_growable_ids(self, ids, training)
                if w is not None:
                    check_bag_weights(self, ids, w)

    def _features(self, inputs, weights):
        where = f"GrowableEmbedding '{self.name}'"
        return bags.features(where, self.combiner, inputs, weights)

    def call(self, inputs, weights=None, training=None):
        features, weights, several = self._features(inputs, weights)
        bags.check_integer_ids(f"GrowableEmbedding '{self.name}'", features)
        concrete = (
            all(growth_backend.is_concrete(ids) for ids in features)
            and not keras_internals.in_stateless_scope()
        )
        # Off inside `kmodels.diagnostics`: no growth, no row update.
        updates = growth_backend.sparse_updates_enabled()
        if concrete:
            sizing.fit_concrete_ids(self, features, training, updates)
        flats = [ops.cast(ops.reshape(ids, (-1,)), "int32") for ids in features]
        # Several features share one lookup, hence one sparse update with
        # the gradients of all of them summed per row.
        flat = ops.concatenate(flats) if several else flats[0]
        keep = None
        if self.combiner is not None and self.mask_zero:
            # Padding in a bag: combined with weight 0 and trains no row.
            keep = ops.not_equal(flat, 0)
        rows = lookup.table_rows(self, flat, keep, training, concrete, updates)
        outputs = bags.feature_outputs(
            self, rows, features, flats, weights, several
        )
        return outputs if several else outputs[0]

    def sparse_row_update(
        self, gather, step, ids, grads, capacity=None, seen=None
    ):
        """One step of the table's optimizer on the rows of `ids` only,
        in `keras.ops`; the backward pass of `sparse_lookup` calls it
        (`kmodels.growable.lookup.sparse_row_update` says how). Returns
        `(rows, new_rows, new_slot_rows)`, to scatter into the table and
        `trained_slots`."""
        return lookup.sparse_row_update(
            self, gather, step, ids, grads, capacity, seen
        )

    def compute_mask(self, inputs, mask=None):
        # A combiner consumes the padding: a bag's vector has no mask.
        if not self.mask_zero or self.combiner is not None:
            return None
        if bags.is_feature_list(inputs):
            return [ops.not_equal(ids, 0) for ids in inputs]
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        several = isinstance(input_shape, list) and all(
            isinstance(s, (list, tuple)) for s in input_shape
        )
        if several:
            return [self.compute_output_shape(tuple(s)) for s in input_shape]
        if self.combiner is not None:
            input_shape = tuple(input_shape)[:-1]
        return tuple(input_shape) + (self.output_dim,)

    # ---------------------------------------------------------------- saving
    def save_own_variables(self, store):
        embedding_state.save(self, store)

    def load_own_variables(self, store):
        embedding_state.load(self, store)
        # Delta marks taken before the load no longer apply.
        delta.forget(self)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "output_dim": self.output_dim,
                "initial_capacity": self.initial_capacity,
                "growth_factor": self.growth_factor,
                "max_capacity": self.max_capacity,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "optimizer": optimizers.serialize(self.optimizer),
                "unseen": self.unseen,
                "oov_id": self.oov_id,
                "mask_zero": self.mask_zero,
                "seed": self.seed,
                "key_index": (
                    None
                    if self.key_index is None
                    else keras.saving.serialize_keras_object(self.key_index)
                ),
                "combiner": self.combiner,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("key_index") is not None:
            config["key_index"] = keras.saving.deserialize_keras_object(
                config["key_index"]
            )
        return cls(**config)
