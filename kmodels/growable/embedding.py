"""An embedding table that grows while the model trains."""

import math
import random
import warnings

import keras
import numpy as np
from keras import ops

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_float
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.backend import growth as growth_backend
from kmodels.contracts.checks import check_bag_weights
from kmodels.contracts.checks import check_growable_ids
from kmodels.contracts.checks import guarded_call
from kmodels.growable import optimizers as sparse_rules
from kmodels.growable.key_index import KeyIndex
from kmodels.growable.saved_state import checked_entries
from kmodels.growable.saved_state import entry_checksums

_UNSEEN = ("zeros", "oov", "error")
_COMBINERS = ("sum", "mean", "sqrtn")
# `_row_uniform` hashes `2 * seed + stream` in 64 bits: distinct up to here.
_MAX_SEED = 2**63 - 1
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(z):
    """SplitMix64 finaliser (Steele et al., 2014), vectorised, wrapping."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) & _MASK64


def _row_uniform(seed, rows, dim, stream=0):
    """Uniform [0, 1) draws for the integer array of `rows`, each a
    function of (seed, row, column) only, so a row's values never depend
    on the table's size nor on when the row is drawn."""
    rows = np.asarray(rows).astype(np.uint64).reshape(-1, 1)
    cols = np.arange(dim, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        key = _splitmix64(
            np.uint64(seed) * np.uint64(2) + np.uint64(stream) + rows * 0
        )
        z = _splitmix64(key ^ (rows * np.uint64(dim) + cols))
    return ((z >> np.uint64(40)).astype(np.float64) + 0.5) / 2.0**24


@keras.saving.register_keras_serializable(package="kmodels")
class GrowableEmbedding(keras.layers.Layer):
    """An embedding table that gains rows while the model trains.

    During training, ids at or past the table's capacity make it grow
    *between* train steps, before the step that uses them, so that very step
    trains the new rows. No backend can create or reshape a variable inside
    a compiled step, so growth inside `model.fit` needs one extra line:
    `callbacks=[kmodels.callbacks.EmbeddingGrowth()]`. Eager calls with
    `training=True` (and `fit` on torch, eager by default) grow by
    themselves. Without the callback, a compiled train step (`fit` on
    TensorFlow and JAX) cannot grow the table: ids at or past the capacity
    are then unseen, as at inference with `unseen="zeros"`: they get zero
    vectors and no row moves (no value, no optimizer slot), while the
    other ids train as usual; a one-time warning says so.
    `kmodels.diagnostics` reads the table the same way and neither grows
    it nor updates it.

    Capacity grows geometrically (times `growth_factor`, at least to fit
    the largest id), so `N` distinct ids cost at most
    `ceil(log(N / initial_capacity) / log(growth_factor))` growths and as
    many recompilations. Row `i` starts from values that depend only on
    `(seed, i)`, not on the capacity: a grown table equals a pre-sized one.

    The table trains with its own row-sparse optimizer: SGD (with momentum,
    optionally Nesterov), Adagrad or Adam, each with a constant learning
    rate or any `keras.optimizers.schedules.LearningRateSchedule`. Only the
    rows of the batch move ("lazy", as TensorFlow Addons' `LazyAdam`: a row
    absent from a batch keeps its values and slots); the slots (momentum,
    Adagrad's accumulator, Adam's moments) are per row, live in the layer,
    grow with the table and are saved with it. So a train step costs in
    proportion to the ids in the batch, not to the table. A schedule is
    evaluated at the table's own `step` (the number of sparse updates it has
    taken, saved with the model), as Keras evaluates it at
    `optimizer.iterations`. `optimizer=None` follows the model's optimizer:
    its kind, hyperparameters and schedule are read when `fit` starts (by
    `kmodels.callbacks.EmbeddingGrowth`, or `follow_optimizer`). The model's
    optimizer itself never touches the table.

    At inference (`training=False`, `predict`, `evaluate`) the table never
    grows; ids past the capacity are "unseen" and get zeros (`unseen=
    "zeros"`), the row of a reserved id (`unseen="oov"`, `oov_id`), or raise
    (`unseen="error"`). Non-integer ids raise a `TypeError`; negative ids and
    ids at or past `max_capacity` raise a `ValueError`. These data checks
    run wherever the ids are concrete: eager calls, torch's eager
    `fit`/`predict`, and the `EmbeddingGrowth` hook before every step of
    `fit` on every backend. Inside a compiled `predict` or `evaluate`
    (TensorFlow, JAX), a data-dependent error is impossible on JAX, so bad
    ids follow the `unseen` rule there on both.

    On JAX the table and its moments can be split by rows over devices
    with `keras.distribution.ModelParallel` (entries from
    `kmodels.distributed.shard_embedding_rows`); the capacity then stays a
    multiple of the number of shards (at build, growth and load) and a grown
    table keeps its sharding. Under `DataParallel` it is replicated.

    With a `combiner` the layer reads padded bags of ids per example (the
    last axis of the ids is the bag) and returns one vector per bag: the
    sum, mean or sqrtn of its rows, each scaled by its optional weight, as
    keras-rs `TableConfig(combiner=...)`, TorchRec `EmbeddingBagCollection`
    and TensorFlow's `embedding_lookup_sparse`. With `mask_zero=True` id 0
    is padding: weight 0, and no row (nor slot) moves for it. One table can
    serve several features (a user's history bag and a candidate item): call
    it once on the list of their ids; it returns one output per feature, and
    the gradients of all of them are summed per row before the table's one
    sparse update of the step. A table takes one call per train step
    (`EmbeddingGrowth` refuses a functional model that calls it twice).

    The arguments are checked at construction, with the same `ValueError`
    on every backend: sizes must be integers >= 1 (`2.5`, `"8"` and `True`
    are refused, not truncated), `growth_factor` a finite number > 1, the
    table optimizer's learning rate (unless a schedule) and epsilon finite
    and > 0, its betas in `[0, 1)`, momentum in `[0, 1]`, Adagrad's
    initial accumulator >= 0, and its hyperparameter names known.

    A bounded `key_index` (`KeyIndex(max_capacity=..., eviction="lru")`)
    gives the row of an evicted key to a new key; `reset_rows` restarts
    such rows (initial values, fresh optimizer slots), and
    `EmbeddingGrowth` does so before every step of `fit`, for the rows the
    index lists (`take_reset_rows`), so a new key never inherits an old
    key's training.

    The saved state (table, optimizer slots, step) carries a CRC32
    checksum per entry: loading checks it and the shapes before it changes
    the layer, and raises a `ValueError` naming the layer and the entry
    otherwise (state saved without checksums loads with a warning).

    Args:
        output_dim: int. Size of each embedding vector.
        initial_capacity: int. Rows at build time (rounded up to a multiple
            of the shards when the rows are sharded).
        growth_factor: float > 1. Capacity multiplier at each growth.
        max_capacity: int or `None`. Growth past it raises a `ValueError`.
        embeddings_initializer: `"uniform"` (default, in
            `[-0.05, 0.05]`), `"normal"` (stddev 0.05), `"zeros"`, or a
            `keras.initializers.RandomUniform` / `RandomNormal` / `Zeros`;
            all are drawn row by row from `seed`.
        optimizer: the table's sparse optimizer: `"adam"` (default),
            `"adagrad"`, `"sgd"`; a `(kind, hyperparameters)` pair such as
            `("sgd", {"learning_rate": 0.1, "momentum": 0.9})`; a
            `keras.optimizers.SGD` / `Adagrad` / `Adam` (its learning rate
            a float or a `LearningRateSchedule`; no weight decay, clipping,
            EMA, gradient accumulation or amsgrad); or `None`: follow the
            model's optimizer (same kind, hyperparameters and schedule,
            read when `fit` starts; it must be an SGD, Adagrad or Adam).
        unseen: `"zeros"`, `"oov"` or `"error"`: what inference returns for
            ids past the capacity.
        oov_id: int or `None`. The reserved row used when `unseen="oov"`;
            must be below `initial_capacity`.
        mask_zero: bool. Whether id 0 is padding (`compute_mask` returns
            `ids != 0`, as `keras.layers.Embedding`).
        seed: int in `[0, 2**63)` or `None`. Seed of the row initializer;
            `None` draws one at construction from Python's `random`, as
            Keras' initializers do, so `keras.utils.set_random_seed` makes
            it reproducible; the drawn seed is kept in the config.
        key_index: optional `kmodels.layers.KeyIndex` mapping raw keys to
            the rows of this table in the data pipeline; saved and loaded
            with the layer. A bounded index (`max_capacity=n`) bounds the
            table too: with `max_capacity=None` the table takes `n` as its
            limit; a smaller `max_capacity`, or an `initial_capacity`
            above `n`, raises a `ValueError`. Inside `fit`,
            `EmbeddingGrowth` restarts (`reset_rows`) the rows the index
            gave to new keys, before each step.
        combiner: `None` (default: one vector per id), `"sum"`, `"mean"` or
            `"sqrtn"`: combine each bag (last axis of the ids) into one
            vector, `sum_j w_j e_j / N` with `N` 1, `sum_j w_j` or
            `sqrt(sum_j w_j^2)`; an empty bag gives zeros.
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

    A history bag and a candidate item sharing one table:

    ```python
    items = kmodels.layers.GrowableEmbedding(
        8, combiner="mean", mask_zero=True)
    history = keras.Input(shape=(20,), dtype="int32")  # 0 = padding
    candidate = keras.Input(shape=(1,), dtype="int32")
    user, item = items([history, candidate])
    score = keras.ops.sum(user * item, axis=-1)
    ```

    References:
        - Kingma and Ba, "Adam: A Method for Stochastic Optimization", 2015.
        - Duchi, Hazan and Singer, "Adaptive Subgradient Methods for Online
          Learning and Stochastic Optimization" (Adagrad), 2011.
        - Sutskever et al., "On the importance of initialization and
          momentum in deep learning", 2013.
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
        seed = check_optional_int(seed, "seed", owner, 0, _MAX_SEED)
        if key_index is not None and not isinstance(key_index, KeyIndex):
            raise ValueError(
                f"{owner}: `key_index` must be a kmodels.layers.KeyIndex or "
                f"None; got {type(key_index).__name__}."
            )
        if combiner is not None:
            combiner = check_choice(combiner, "combiner", owner, _COMBINERS)
        table_optimizer = _table_optimizer(optimizer)
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
        self._init_kind, self._init_args = _row_initializer(
            self.embeddings_initializer
        )
        self.optimizer = table_optimizer
        # `optimizer=None`: the model optimizer's (kind, hyperparameters),
        # read when fit starts (`follow_optimizer`).
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

    # ----------------------------------------------------------------- build
    def build(self, input_shape=None):
        if self.built:
            return
        trainable = growth_backend.table_is_trainable()
        # Sharded by rows (`keras.distribution`, JAX), the capacity must be
        # a multiple of the shards: JAX refuses to split 6 rows over 4.
        shards = growth_backend.planned_row_shards(
            self, "embeddings", (self.initial_capacity, self.output_dim)
        )
        capacity = _round_up(self.initial_capacity, shards)
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
                    self._slot_initial_value(name) or 0.0
                ),
                name=name,
                trainable=trainable,
                overwrite_with_gradient=trainable,
                autocast=False,
            )
            for name in self._slot_names()
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
        )
        self.built = True

    def _slot_names(self):
        """Names of `slot_variables`, in order."""
        if self.optimizer is None:
            return _FOLLOWED_SLOTS
        return sparse_rules.slot_names(*self.optimizer)

    def _slot_initial_value(self, name):
        """Value of a fresh row of slot `name`; `None` while `optimizer=None`
        has not followed a rule yet."""
        rule = self.table_optimizer
        if rule is None:
            return None if name == "accumulator" else 0.0
        return sparse_rules.slot_initial_value(*rule, name)

    @property
    def table_optimizer(self):
        """`(kind, hyperparameters)` of the rule the table trains with:
        `optimizer`'s, or with `optimizer=None` the model optimizer's as
        read by `follow_optimizer` (`None` before)."""
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
        slots = dict(zip(self._slot_names(), self.slot_variables))
        return [slots[name] for name in sparse_rules.slot_names(*rule)]

    def follow_optimizer(self, optimizer):
        """With `optimizer=None`, makes the table train with the rule of the
        Keras `optimizer` (the model's): same kind, hyperparameters and
        learning-rate schedule. `kmodels.callbacks.EmbeddingGrowth` calls it
        when `fit` starts; a custom training loop calls it before training.

        The slots of the rule keep their rows when the table already holds
        that rule's state (a later `fit`, a loaded model); otherwise they,
        and the step, start fresh (zero; Adagrad's accumulator at its
        `initial_accumulator_value`), as a new Keras optimizer would. Does
        nothing for a table with its own optimizer.

        Args:
            optimizer: a `keras.optimizers.SGD`, `Adagrad` or `Adam` (a
                `LossScaleOptimizer` is read through).

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
        table.table_optimizer[0]  # "adagrad"
        ```
        """
        if self.optimizer is not None:
            return False
        inner = getattr(optimizer, "inner_optimizer", None)
        rule = _from_keras_optimizer(
            optimizer if inner is None else inner,
            f"GrowableEmbedding '{self.name}' has optimizer=None: it follows "
            "the model's optimizer, which",
        )
        if not self.built:
            self.build()
        changed = rule != self._followed
        self._followed = rule
        needed = sparse_rules.slot_names(*rule)
        live = [
            name
            for name, slot in zip(self._slot_names(), self.slot_variables)
            if slot.shape[0]
        ]
        if sorted(live) != sorted(needed):
            # Another rule's state, or none yet: the rule starts fresh.
            for name, slot in zip(self._slot_names(), self.slot_variables):
                rows = self.capacity if name in needed else 0
                growth_backend.resize_variable(
                    slot, self._fresh_slot_rows(name, 0, rows, slot.dtype)
                )
            self.step.assign(0.0)
            self._unset_from = {}
            return True
        for name, start in self._unset_from.items():
            slot = dict(zip(self._slot_names(), self.slot_variables))[name]
            kept = ops.convert_to_numpy(slot.value)[:start]
            growth_backend.resize_variable(
                slot,
                np.concatenate(
                    [
                        kept,
                        self._fresh_slot_rows(
                            name, start, self.capacity, kept.dtype
                        ),
                    ]
                ),
            )
        self._unset_from = {}
        return changed

    def _fresh_slot_rows(self, name, start, stop, dtype):
        """Rows `start..stop-1` of a fresh slot `name`."""
        value = self._slot_initial_value(name)
        if value is None:
            # Not known yet (`optimizer=None`): filled in when it is.
            self._unset_from.setdefault(name, start)
            value = 0.0
        return np.full((stop - start, self.output_dim), value, dtype)

    def _initial_rows(self, start, stop):
        return self._initial_rows_at(np.arange(start, stop))

    def _initial_rows_at(self, rows):
        """Initial values of the integer array of `rows`: those row `r` had
        when the table was built or grew to hold it."""
        dim = self.output_dim
        kind, args = self._init_kind, self._init_args
        if kind == "zeros":
            values = np.zeros((len(rows), dim))
        elif kind == "uniform":
            low, high = args
            values = low + (high - low) * _row_uniform(self.seed, rows, dim)
        else:  # normal, Box-Muller on two independent streams
            mean, stddev = args
            u1 = _row_uniform(self.seed, rows, dim, stream=0)
            u2 = _row_uniform(self.seed, rows, dim, stream=1)
            values = mean + stddev * np.sqrt(-2.0 * np.log(u1)) * np.cos(
                2.0 * np.pi * u2
            )
        return values.astype(self.variable_dtype)

    def reset_rows(self, rows):
        """Restarts `rows` as if new: values from the row initializer (the
        values row `r` got when the table first held it) and optimizer
        slots at their initial value (zero; Adagrad's accumulator at its
        `initial_accumulator_value`). Other rows, and the step, are left
        as they are.

        A bounded `KeyIndex` gives the row of an evicted key to a new key;
        that key must not inherit the old one's training. Inside `fit`,
        `kmodels.callbacks.EmbeddingGrowth` does this by itself before
        every step, for the rows `key_index.take_reset_rows()` lists. Call
        it yourself between the steps of a custom training loop; never
        inside a compiled step. Costs in proportion to `len(rows)` (a
        scatter of those rows), not to the table.

        Args:
            rows: integers in `[0, capacity)` (a list or a 1-D NumPy
                array, any integer dtype); repeats are reset once.

        Returns:
            The rows reset, sorted and unique, as an int64 NumPy array.

        Example:

        ```python
        index = kmodels.layers.KeyIndex(max_capacity=3, eviction="lru")
        table = kmodels.layers.GrowableEmbedding(
            4, initial_capacity=3, key_index=index
        )
        table.build()
        index.lookup([10, 20])  # array([1, 2])
        index.lookup([30])  # array([1]): 30 takes the row of 10
        table.reset_rows(index.take_reset_rows())  # array([1])
        ```
        """
        where = f"GrowableEmbedding '{self.name}'.reset_rows"
        if isinstance(rows, (int, np.integer)) and not isinstance(rows, bool):
            raise TypeError(
                f"{where} expects a 1-D array or list of integer rows; got "
                f"the scalar {rows!r}. Pass [{rows!r}]."
            )
        array = np.asarray(ops.convert_to_numpy(rows))
        if array.ndim != 1:
            raise ValueError(
                f"{where} expects a 1-D array of rows; got shape {array.shape}."
            )
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(
                f"{where} expects integer rows; got dtype {array.dtype}."
            )
        if not self.built:
            self.build()
        rows = np.unique(array.astype(np.int64))
        if not rows.size:
            return rows
        if rows[0] < 0 or rows[-1] >= self.capacity:
            bad = rows[0] if rows[0] < 0 else rows[-1]
            raise ValueError(
                f"{where} expects rows in [0, capacity={self.capacity}); "
                f"got {int(bad)}."
            )
        growth_backend.write_rows(
            self.embeddings, rows, self._initial_rows_at(rows)
        )
        for name, slot in zip(self._slot_names(), self.slot_variables):
            if not slot.shape[0]:
                continue  # a followed rule's slot not in use
            value = self._slot_initial_value(name) or 0.0
            growth_backend.write_rows(
                slot, rows, np.full((len(rows), self.output_dim), value)
            )
        return rows

    @property
    def row_limit(self):
        """Most rows the table may hold: `max_capacity`, or, when that is
        `None`, the `max_capacity` of a bounded `key_index` (whose rows are
        all below it); `None` when unbounded."""
        if self.max_capacity is not None:
            return self.max_capacity
        return getattr(self.key_index, "max_capacity", None)

    def check_key_index(self):
        """Checks that the table can hold every row its `key_index` hands
        out: a bounded index (`KeyIndex(max_capacity=n)`) needs a table
        with `max_capacity` `None` (the table then takes `n` as its limit)
        or `>= n`, and `initial_capacity <= n`. Raises a `ValueError`
        otherwise. Runs at construction and when `fit` starts (for an index
        attached later)."""
        bound = getattr(self.key_index, "max_capacity", None)
        if bound is None:
            return
        where = f"GrowableEmbedding '{self.name}'"
        if self.max_capacity is not None and self.max_capacity < bound:
            raise ValueError(
                f"{where} has max_capacity={self.max_capacity}, smaller than "
                f"its key_index's max_capacity={bound}: the index hands out "
                f"rows up to {bound - 1}. Pass max_capacity=None (the table "
                f"takes the index's {bound}) or >= {bound}."
            )
        if self.initial_capacity > bound:
            raise ValueError(
                f"{where} has initial_capacity={self.initial_capacity}, more "
                f"than its key_index's max_capacity={bound}: rows past "
                f"{bound - 1} would never be used. Pass initial_capacity <= "
                f"{bound}."
            )

    # -------------------------------------------------------------- capacity
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
        of the table's rows under `keras.distribution` (1 without one, and
        on TensorFlow and torch, whose Keras backends ignore layouts)."""
        if not self.built:
            return 1
        return growth_backend.row_shards(self.embeddings)

    def check_ids(self, ids):
        """Validates concrete ids (NumPy or a backend tensor) and returns
        them as a NumPy integer array. Raises `TypeError` for non-integer
        ids and `ValueError` for negative ids or ids past `max_capacity`,
        with the same message on every backend."""
        ids = np.asarray(ops.convert_to_numpy(ids))
        if not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(
                f"GrowableEmbedding '{self.name}' expects integer ids; got "
                f"dtype {ids.dtype}. Map raw keys to rows with "
                "kmodels.layers.KeyIndex."
            )
        if ids.size:
            low, high = int(ids.min()), int(ids.max())
            if low < 0:
                raise ValueError(
                    f"GrowableEmbedding '{self.name}' expects ids >= 0; got "
                    f"{low}."
                )
            limit = self.row_limit
            if limit is not None and high >= limit:
                whose = ""
                if self.max_capacity is None:
                    whose = " (its key_index's)"
                raise ValueError(
                    f"GrowableEmbedding '{self.name}' reached max_capacity="
                    f"{limit}{whose}: got id {high}, which needs "
                    f"{high + 1} rows. Raise max_capacity or remap ids."
                )
        return ids

    def required_capacity(self, max_id):
        """The capacity growth picks for ids up to `max_id`: the current one
        times the smallest power of `growth_factor` that fits, capped at
        `max_capacity`, rounded up to a multiple of `row_multiple`; the
        current capacity when it already fits."""
        capacity = self.capacity
        if max_id < capacity:
            return capacity
        new = capacity
        while new <= max_id:
            new = max(new + 1, int(math.ceil(new * self.growth_factor)))
        if self.row_limit is not None:
            new = min(new, max(self.row_limit, max_id + 1))
        return _round_up(new, self.row_multiple)

    def ensure_capacity(self, ids):
        """Grows the table (eagerly, between steps) so that the concrete
        `ids` fit; returns the new capacity."""
        return self._fit_checked_ids(self.check_ids(ids))

    def _fit_checked_ids(self, ids):
        """`ensure_capacity` for ids `check_ids` returned."""
        if ids.size:
            target = self.required_capacity(int(ids.max()))
            if target > self.capacity:
                self.grow_to(target)
        return self.capacity

    def grow_to(self, capacity):
        """Grows the table to `capacity` rows: old rows keep their values
        and optimizer slots, new rows start from the row initializer with
        zero slots. Must run outside compiled steps. `capacity` is rounded
        up to a multiple of `row_multiple`; a sharded table stays sharded
        the same way (JAX: the old rows stay on the devices, only the new
        rows are made on the host)."""
        if not self.built:
            self.build()
        old = self.capacity
        multiple = self.row_multiple
        capacity = _round_up(int(capacity), multiple)
        if capacity <= old:
            return
        limit = self.row_limit
        if limit is not None and capacity > _round_up(limit, multiple):
            raise ValueError(
                f"GrowableEmbedding '{self.name}' cannot grow to {capacity} "
                f"rows: max_capacity={limit}."
            )
        self._append_rows(old, capacity)
        self.growth_log.append({"from": old, "to": capacity})

    def _append_rows(self, old, capacity):
        growth_backend.append_rows(
            self.embeddings, self._initial_rows(old, capacity)
        )
        for name, slot in zip(self._slot_names(), self.slot_variables):
            if not slot.shape[0]:
                continue  # a followed rule's slot not in use
            growth_backend.append_rows(
                slot, self._fresh_slot_rows(name, old, capacity, slot.dtype)
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
        return repeated_call_error(self.name, how)

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
        """`(ids of each feature, weights of each, several)`: `inputs` is
        one tensor of ids or a list of them (one table shared by several
        features, `several=True`); `weights` is `None`, a tensor, or a list
        like `inputs`. Raises on a structure the layer cannot read."""
        where = f"GrowableEmbedding '{self.name}'"
        several = _is_feature_list(inputs)
        features = list(inputs) if several else [inputs]
        for ids in features:
            _refuse_ragged(ids, where, "ids")
        if weights is None:
            weights = [None] * len(features)
        elif several:
            if not isinstance(weights, (list, tuple)) or len(weights) != len(
                features
            ):
                raise ValueError(
                    f"{where} got {len(features)} features: `weights` must "
                    f"be None or a list of {len(features)} (tensors or "
                    f"None), one per feature; got {_describe(weights)}."
                )
            weights = list(weights)
        else:
            weights = [weights]
        if self.combiner is None and any(w is not None for w in weights):
            raise ValueError(
                f"{where} got `weights` but has combiner=None: per-id weights "
                "scale the ids of a bag before they are combined. Pass "
                'combiner="sum", "mean" or "sqrtn".'
            )
        for ids, w in zip(features, weights):
            shape = _static_shape(ids)
            if self.combiner is not None and shape is not None:
                if len(shape) < 2:
                    raise ValueError(
                        f"{where} has combiner={self.combiner!r}: it expects "
                        "padded bags of ids of shape (batch, bag) (the last "
                        f"axis is the bag); got shape {shape}."
                    )
            if w is None:
                continue
            _refuse_ragged(w, where, "weights")
            w_shape = _static_shape(w)
            if shape is None or w_shape is None:
                continue
            same = len(shape) == len(w_shape) and all(
                a is None or b is None or a == b for a, b in zip(shape, w_shape)
            )
            if not same:
                raise ValueError(
                    f"{where}: `weights` must have the shape of the ids "
                    f"(one weight per id), {shape}; got {w_shape}."
                )
        return features, weights, several

    def call(self, inputs, weights=None, training=None):
        features, weights, several = self._features(inputs, weights)
        for ids in features:
            if not _is_integer_dtype(ids):
                raise TypeError(
                    f"GrowableEmbedding '{self.name}' expects integer ids; "
                    "got dtype "
                    f"{keras.backend.standardize_dtype(ids.dtype)}. Map "
                    "raw keys to rows with kmodels.layers.KeyIndex."
                )
        concrete = (
            all(growth_backend.is_concrete(ids) for ids in features)
            and not _in_stateless()
        )
        # Off inside `kmodels.diagnostics`: no growth, no row update.
        updates = growth_backend.sparse_updates_enabled()
        if concrete:
            checked = np.concatenate(
                [self.check_ids(ids).reshape(-1) for ids in features]
            )
            if training:
                if updates:
                    self._fit_checked_ids(checked)
            elif self.unseen == "error" and checked.size:
                if int(checked.max()) >= self.capacity:
                    raise ValueError(
                        f"GrowableEmbedding '{self.name}' got unseen id "
                        f"{int(checked.max())} at inference (capacity "
                        f'{self.capacity}) and unseen="error".'
                    )
        shapes = [ops.shape(ids) for ids in features]
        flats = [ops.cast(ops.reshape(ids, (-1,)), "int32") for ids in features]
        # Several features share one lookup, hence one sparse update with
        # the gradients of all of them summed per row.
        flat = ops.concatenate(flats) if several else flats[0]
        keep = None
        if self.combiner is not None and self.mask_zero:
            # Padding in a bag: combined with weight 0 and trains no row.
            keep = ops.not_equal(flat, 0)
        rows = self._lookup(flat, keep, training, concrete, updates)
        outputs = []
        start = 0
        for ids, shape, part, w in zip(features, shapes, flats, weights):
            if several:
                stop = start + ops.shape(part)[0]
                part = rows[start:stop]
                start = stop
            else:
                part = rows
            part = ops.reshape(part, tuple(shape) + (self.output_dim,))
            if self.combiner is not None:
                part = self._combine(part, ids, w)
            outputs.append(part)
        return outputs if several else outputs[0]

    def _lookup(self, flat, keep, training, concrete, updates):
        """Rows of the flat int32 ids, `(n, output_dim)` in the compute
        dtype. `keep`: optional boolean mask of `flat`; the other entries
        (padding of bags) train no row."""
        # Read from the variable, not a Python int: on TensorFlow a function
        # traced before a growth must see the new capacity.
        capacity = growth_backend.capacity_of(self.embeddings)
        if training and self.trainable and not updates:
            # A plain gather: the table gets an ordinary dense gradient and
            # nothing is written; ids past the capacity give zeros.
            seen = ops.logical_and(flat >= 0, flat < capacity)
            rows = ops.take(
                self.embeddings.value, ops.where(seen, flat, 0), axis=0
            )
            rows = ops.where(ops.expand_dims(seen, -1), rows, 0)
        elif training and self.trainable:
            if self.table_optimizer is None:
                raise ValueError(unfollowed_optimizer_error(self.name))
            if self.compute_dtype == "float16" and not self._warned_float16:
                self._warned_float16 = True
                warnings.warn(float16_warning(self.name), stacklevel=2)
            if concrete or self.managed_growth:
                # Every id fits: grown just above, or by EmbeddingGrowth
                # before the step.
                flat = ops.clip(flat, 0, capacity - 1)
                rows = growth_backend.sparse_lookup(self, flat, seen=keep)
            else:
                rows = self._unmanaged_lookup(flat, capacity, keep)
        else:
            seen = ops.logical_and(flat >= 0, flat < capacity)
            if self.unseen == "oov":
                flat = ops.where(seen, flat, self.oov_id)
                rows = ops.take(self.embeddings.value, flat, axis=0)
            else:
                rows = ops.take(
                    self.embeddings.value, ops.where(seen, flat, 0), axis=0
                )
                rows = rows * ops.cast(ops.expand_dims(seen, -1), rows.dtype)
        return ops.cast(rows, self.compute_dtype)

    def _combine(self, rows, ids, weights):
        """Combines the rows `(..., bag, dim)` of each bag into one vector
        `(..., dim)`: sum, mean or sqrtn of the rows times their weights
        (1 without `weights`; 0 for padding), as TensorFlow's
        `embedding_lookup_sparse`. An empty bag gives zeros."""
        dtype = rows.dtype
        if weights is None:
            w = ops.ones(ops.shape(ids), dtype)
        else:
            w = ops.cast(weights, dtype)
        if self.mask_zero:
            w = w * ops.cast(ops.not_equal(ids, 0), dtype)
        total = ops.sum(rows * ops.expand_dims(w, -1), axis=-2)
        if self.combiner == "sum":
            return total
        if self.combiner == "mean":
            norm = ops.sum(w, axis=-1, keepdims=True)
        else:
            norm = ops.sqrt(ops.sum(w * w, axis=-1, keepdims=True))
        nonzero = ops.not_equal(norm, 0)
        # The division of an empty bag never runs (no NaN in its gradient).
        safe = ops.where(nonzero, norm, ops.ones_like(norm))
        return ops.where(nonzero, total / safe, ops.zeros_like(total))

    def _unmanaged_lookup(self, flat, capacity, keep=None):
        """Training lookup inside a compiled step without `EmbeddingGrowth`:
        the table cannot grow, so ids at or past the capacity (or negative)
        get zero vectors and move no row; the others train as usual (but
        the entries outside `keep`, padding of bags)."""
        if not self._warned_unmanaged:
            self._warned_unmanaged = True
            warnings.warn(
                unmanaged_growth_warning(self.name, self.capacity),
                stacklevel=3,
            )
        seen = ops.logical_and(flat >= 0, flat < capacity)
        if keep is not None:
            seen = ops.logical_and(seen, keep)
        rows = growth_backend.sparse_lookup(
            self, ops.where(seen, flat, 0), seen=seen
        )
        return ops.where(ops.expand_dims(seen, -1), rows, 0)

    def sparse_row_update(
        self, gather, step, ids, grads, capacity=None, seen=None
    ):
        """One step of the table's optimizer on the rows of `ids` only.

        `gather(k, rows)` returns the given rows of the table (`k=0`) or of
        `trained_slots[k - 1]`: backends pass a sparse read (reading a whole
        TensorFlow variable before an in-place scatter would copy it).

        Gradients of repeated ids are summed first (as a dense gradient
        would). Returns `(rows, new_rows, new_slot_rows)`: `rows` holds each
        distinct id once, padded to `len(ids)` by repeating the first id
        with identical values, so a scatter of the result is deterministic
        on every backend.

        `seen`: optional boolean mask of `ids`. Entries where it is false
        add nothing, and a row that only such entries name keeps its values
        and slots (written back unchanged).
        """
        n = ops.shape(ids)[0]
        grads = ops.reshape(
            ops.cast(grads, self.variable_dtype), (-1, self.output_dim)
        )
        if seen is not None:
            grads = ops.where(ops.expand_dims(seen, -1), grads, 0)
        order = growth_backend.argsort_ids(ids, capacity)
        sorted_ids = ops.take(ids, order)
        sorted_grads = ops.take(grads, order, axis=0)
        starts = ops.concatenate(
            [
                ops.ones((1,), "int32"),
                ops.cast(
                    ops.not_equal(sorted_ids[1:], sorted_ids[:-1]), "int32"
                ),
            ]
        )
        segments = ops.cumsum(starts) - 1
        summed = ops.segment_sum(sorted_grads, segments, n)
        count = segments[-1] + 1
        valid = ops.arange(n, dtype="int32") < count
        rows = ops.segment_max(sorted_ids, segments, n)
        rows = ops.where(valid, rows, sorted_ids[0])
        current = gather(0, rows)
        kind, hyper = self.table_optimizer
        old_slots = [
            gather(k + 1, rows) for k in range(len(self.trained_slots))
        ]
        new_rows, new_slots = sparse_rules.sparse_rule(
            kind,
            hyper,
            step,
            current,
            old_slots,
            summed,
            self.variable_dtype,
        )
        if seen is not None:
            # Rows named only by unseen entries: written back unchanged.
            sorted_seen = ops.cast(ops.take(seen, order), "int32")
            touched = ops.expand_dims(
                ops.segment_max(sorted_seen, segments, n) > 0, -1
            )
            new_rows = ops.where(touched, new_rows, current)
            new_slots = [
                ops.where(touched, s, o) for s, o in zip(new_slots, old_slots)
            ]
        keep = ops.expand_dims(valid, -1)
        new_rows = ops.where(keep, new_rows, new_rows[:1])
        new_slots = [ops.where(keep, s, s[:1]) for s in new_slots]
        return rows, new_rows, new_slots

    def compute_mask(self, inputs, mask=None):
        # A combiner consumes the padding: a bag's vector has no mask.
        if not self.mask_zero or self.combiner is not None:
            return None
        if _is_feature_list(inputs):
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
    def _entry_names(self):
        # `optimizer=None`: every slot a followed rule may use, those not in
        # use with no rows.
        return ("embeddings", *self._slot_names(), "step")

    def save_own_variables(self, store):
        entries = {"embeddings": ops.convert_to_numpy(self.embeddings.value)}
        for name, slot in zip(self._slot_names(), self.slot_variables):
            entries[name] = ops.convert_to_numpy(slot.value)
        entries["step"] = ops.convert_to_numpy(self.step.value)
        for name, value in entries.items():
            store[name] = value
        store["checksum"] = entry_checksums(entries, self._entry_names())

    def load_own_variables(self, store):
        where = f"GrowableEmbedding '{self.name}'"
        # Everything is read and checked before the layer changes.
        entries = checked_entries(store, self._entry_names(), where)
        table = entries["embeddings"]
        if (
            table.ndim != 2
            or table.shape[0] < 1
            or table.dtype.kind not in "fV"
        ):
            raise ValueError(
                f"{where}: saved entry 'embeddings' must be a 2-D float "
                f"array with rows; got shape {table.shape}, dtype "
                f"{table.dtype}."
            )
        if table.shape[1] != self.output_dim:
            raise ValueError(
                f"GrowableEmbedding '{self.name}': saved rows have "
                f"{table.shape[1]} columns; output_dim={self.output_dim}."
            )
        for name in self._slot_names():
            shape = entries[name].shape
            unused = self.optimizer is None and shape == (0, table.shape[1])
            if shape != table.shape and not unused:
                raise ValueError(
                    f"{where}: saved entry {name!r} (an optimizer slot) has "
                    f"shape {entries[name].shape}; the saved table has "
                    f"{table.shape}."
                )
        if entries["step"].shape != ():
            raise ValueError(
                f"{where}: saved entry 'step' must be a scalar; got shape "
                f"{entries['step'].shape}."
            )
        if not self.built:
            self.build()
        # Saved with another number of shards (or none): pad to a multiple
        # of this table's (JAX cannot shard the saved rows otherwise), with
        # the rows growth would have added.
        saved = len(table)
        capacity = _round_up(saved, self.row_multiple)
        growth_backend.resize_variable(
            self.embeddings,
            np.concatenate([table, self._initial_rows(saved, capacity)]),
        )
        if self.optimizer is None:
            # The saved slots say which rule's state they hold; the next
            # `follow_optimizer` keeps them if the model's rule is that one.
            self._followed = None
            self._unset_from = {}
        for name, slot in zip(self._slot_names(), self.slot_variables):
            values = entries[name]
            if len(values):
                pad = self._fresh_slot_rows(name, saved, capacity, values.dtype)
                values = np.concatenate([values, pad])
            growth_backend.resize_variable(slot, values)
        self.step.assign(entries["step"])

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
                "optimizer": _serialize_optimizer(self.optimizer),
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


def float16_warning(name):
    """The one-time warning of a `GrowableEmbedding` that trains under a
    float16 policy, where Keras scales the loss by default."""
    return (
        f"GrowableEmbedding '{name}' trains under a float16 policy: its "
        "sparse optimizer runs in the backward pass and receives the "
        "gradients of the scaled loss (compile(auto_scale_loss=True) is "
        "the default under mixed_float16) without unscaling them, so an "
        "SGD table steps too far. Compile with auto_scale_loss=False, or "
        "use mixed_bfloat16."
    )


def unmanaged_growth_warning(name, capacity):
    """The one-time warning of a `GrowableEmbedding` that trains inside a
    compiled step without `EmbeddingGrowth`."""
    return (
        f"GrowableEmbedding '{name}' is training inside a compiled step "
        "without kmodels.callbacks.EmbeddingGrowth: the table cannot grow "
        f"there, so ids at or past its capacity ({capacity}) are treated as "
        "unseen: they get zero vectors and train no row (ids are not "
        "checked either). Pass callbacks=[kmodels.callbacks.EmbeddingGrowth()] "
        "to fit to grow the table for them."
    )


def _is_feature_list(inputs):
    """Whether `inputs` lists several features (tensors or arrays), as
    opposed to one nested Python list of ids."""
    return (
        isinstance(inputs, (list, tuple))
        and len(inputs) > 0
        and all(hasattr(x, "shape") and hasattr(x, "dtype") for x in inputs)
    )


def _static_shape(x):
    """The shape of `x` with `None` for unknown dimensions; `None` when
    unknown (a Python list is read as an array)."""
    shape = getattr(x, "shape", None)
    if shape is None:
        try:
            shape = np.asarray(x).shape
        except ValueError:
            return None
    try:
        return tuple(None if d is None else int(d) for d in shape)
    except TypeError:
        return None


def _refuse_ragged(x, where, name):
    kind = type(x).__name__
    if kind in ("RaggedTensor", "SparseTensor"):
        raise TypeError(
            f"{where} expects padded `{name}` (a dense tensor, padding id 0 "
            f"with mask_zero=True); got a {kind}. Pad it first, e.g. "
            "ragged.to_tensor() or keras.utils.pad_sequences."
        )
    if isinstance(x, (list, tuple)) and not _is_feature_list(x):
        try:
            np.asarray(x)
        except ValueError:
            raise ValueError(
                f"{where} expects padded `{name}` of one shape (batch, bag); "
                "got Python lists of different lengths. Pad them first, e.g. "
                "keras.utils.pad_sequences, with id 0 and mask_zero=True."
            ) from None


def _describe(value):
    return f"{type(value).__name__}"


def _round_up(n, multiple):
    return -(-int(n) // int(multiple)) * int(multiple)


def _is_integer_dtype(x):
    dtype = keras.backend.standardize_dtype(x.dtype)
    return dtype.startswith("int") or dtype.startswith("uint")


def _in_stateless():
    from keras.src.backend.common.stateless_scope import in_stateless_scope

    return in_stateless_scope()


def _row_initializer(initializer):
    name = type(initializer).__name__
    if name == "Zeros":
        return "zeros", ()
    if name == "RandomUniform":
        return "uniform", (initializer.minval, initializer.maxval)
    if name == "RandomNormal":
        return "normal", (initializer.mean, initializer.stddev)
    raise ValueError(
        "GrowableEmbedding draws rows one by one so that growth never changes "
        "them; embeddings_initializer must be 'uniform', 'normal', 'zeros' "
        "or a keras.initializers.RandomUniform / RandomNormal / Zeros; got "
        f"{name}."
    )


_DEFAULTS = {
    "sgd": {"learning_rate": 0.01, "momentum": 0.0, "nesterov": False},
    "adagrad": {
        "learning_rate": 0.001,
        "initial_accumulator_value": 0.1,
        "epsilon": 1e-7,
    },
    "adam": {
        "learning_rate": 0.001,
        "beta_1": 0.9,
        "beta_2": 0.999,
        "epsilon": 1e-7,
    },
}
# The slots a followed rule may use (`optimizer=None`).
_FOLLOWED_SLOTS = ("momentum", "velocity", "accumulator")
_KERAS_NAMES = "keras.optimizers.SGD, Adagrad or Adam"
# Keras optimizer settings the sparse rules do not apply.
_UNSUPPORTED_SETTINGS = (
    "weight_decay",
    "clipnorm",
    "clipvalue",
    "global_clipnorm",
    "use_ema",
    "gradient_accumulation_steps",
)


def repeated_call_error(name, how):
    """The error of a table called more than once (`how`, e.g. "2 times in
    model 'm'") where it trains: its sparse update runs once per call."""
    return (
        f"GrowableEmbedding '{name}' is called {how}; a table takes one "
        "call per step (its sparse update runs once per call). Share it "
        "between features with one call on a list of ids, e.g. "
        "`table([history, item])`, which returns one output per feature "
        "and sums their gradients before the single update."
    )


def unfollowed_optimizer_error(name):
    """The message of a `GrowableEmbedding(optimizer=None)` that trains
    before it knows the model's optimizer."""
    return (
        f"GrowableEmbedding '{name}' has optimizer=None (follow the model's "
        "optimizer) but has not read it: kmodels.callbacks.EmbeddingGrowth "
        "reads it when fit starts. Pass callbacks=[kmodels.callbacks."
        "EmbeddingGrowth()] to fit, call layer.follow_optimizer(optimizer) "
        "before a custom training loop, or give the table its own optimizer."
    )


def _table_optimizer(optimizer):
    """Normalises `optimizer` to `(kind, hyperparameters)`, checked, or
    `None` (follow the model's optimizer)."""
    if optimizer is None:
        return None
    if isinstance(optimizer, (tuple, list)) and len(optimizer) == 2:
        kind, hyper = optimizer
        return _checked_optimizer(kind, hyper)
    if isinstance(optimizer, dict) and "kind" in optimizer:
        hyper = {k: v for k, v in optimizer.items() if k != "kind"}
        return _checked_optimizer(optimizer["kind"], hyper)
    if isinstance(optimizer, str):
        return _checked_optimizer(optimizer, {})
    if isinstance(optimizer, keras.optimizers.Optimizer):
        return _from_keras_optimizer(
            optimizer, "GrowableEmbedding's table optimizer"
        )
    raise ValueError(
        f"GrowableEmbedding: unsupported optimizer {optimizer!r}; use 'sgd', "
        f"'adagrad', 'adam', a {_KERAS_NAMES}, or None (follow the model's "
        "optimizer)."
    )


def _from_keras_optimizer(optimizer, where):
    """`(kind, hyperparameters)` of a Keras optimizer; `where` starts the
    error messages ("... must be a keras.optimizers.SGD, ...")."""
    kind = type(optimizer).__name__.lower()
    if not isinstance(optimizer, keras.optimizers.Optimizer) or (
        kind not in _DEFAULTS
    ):
        raise ValueError(
            f"{where} must be a {_KERAS_NAMES} (the row-sparse rules "
            f"GrowableEmbedding has); got {type(optimizer).__name__}. Give "
            "the table its own optimizer, e.g. optimizer='adagrad'."
        )
    for setting in _UNSUPPORTED_SETTINGS:
        value = getattr(optimizer, setting, None)
        if value:
            raise ValueError(
                f"{where} must be a {_KERAS_NAMES} without {setting}: "
                f"GrowableEmbedding's sparse {kind} does not apply it; got "
                f"{setting}={value!r}."
            )
    if getattr(optimizer, "amsgrad", False):
        raise ValueError(
            f"{where} must be a {_KERAS_NAMES} without amsgrad: "
            "GrowableEmbedding's sparse adam does not apply it; got "
            "amsgrad=True."
        )
    rate = optimizer._learning_rate
    if isinstance(rate, keras.Variable):
        rate = float(ops.convert_to_numpy(rate.value))
    elif callable(rate) and not isinstance(
        rate, keras.optimizers.schedules.LearningRateSchedule
    ):
        raise ValueError(
            f"{where} must have a learning rate that is a number or a "
            "keras.optimizers.schedules.LearningRateSchedule; got a "
            f"{type(rate).__name__}."
        )
    names = [n for n in _DEFAULTS[kind] if n != "learning_rate"]
    hyper = {n: getattr(optimizer, n) for n in names}
    return _checked_optimizer(kind, {"learning_rate": rate, **hyper})


def _checked_optimizer(kind, hyper):
    """`(kind, hyperparameters with defaults)`, each one checked: a
    negative learning rate would train backwards, a `beta` of 1 divides by
    zero, an unknown name would be ignored."""
    owner = "GrowableEmbedding"
    if isinstance(kind, str):
        kind = kind.lower()
    kind = check_choice(kind, "optimizer", owner, tuple(_DEFAULTS))
    if not isinstance(hyper, dict):
        raise ValueError(
            f"{owner}: the hyperparameters of `optimizer` must be a dict; "
            f"got {type(hyper).__name__}."
        )
    unknown = sorted(set(hyper) - set(_DEFAULTS[kind]), key=str)
    if unknown:
        raise ValueError(
            f"{owner}: `optimizer` {kind!r} takes hyperparameters "
            f"{sorted(_DEFAULTS[kind])}; got unknown {unknown}."
        )
    hyper = {**_DEFAULTS[kind], **hyper}
    checked = {}
    for name, value in hyper.items():
        label = f"optimizer.{name}"
        if name == "learning_rate":
            number = _checked_learning_rate(value, label, owner)
        elif name == "nesterov":
            number = check_bool(value, label, owner)
        elif name == "momentum":
            number = check_float(value, label, owner, 0, 1)
        elif name == "initial_accumulator_value":
            number = check_float(value, label, owner, 0)
        elif name.startswith("beta"):
            try:
                number = check_float(value, label, owner, 0, 1)
            except ValueError:
                number = 1.0
            if number == 1.0:
                raise ValueError(
                    f"{owner}: `{label}` must be a finite number in [0, 1); "
                    f"got {value!r} ({type(value).__name__})."
                )
        else:
            number = check_float(value, label, owner, 0, exclusive_minimum=True)
        checked[name] = number
    return kind, checked


def _checked_learning_rate(value, label, owner):
    """A learning rate: a finite number > 0, or a
    `keras.optimizers.schedules.LearningRateSchedule` (also as the dict
    `keras.optimizers.schedules.serialize` writes, from a config)."""
    schedules = keras.optimizers.schedules
    if isinstance(value, dict):
        value = schedules.deserialize(value)
    if isinstance(value, schedules.LearningRateSchedule):
        return value
    return check_float(value, label, owner, 0, exclusive_minimum=True)


def _serialize_optimizer(optimizer):
    if optimizer is None:
        return None
    kind, hyper = optimizer
    rate = hyper["learning_rate"]
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        rate = keras.optimizers.schedules.serialize(rate)
    return {"kind": kind, **hyper, "learning_rate": rate}
