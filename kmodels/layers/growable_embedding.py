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
from kmodels.contracts.checks import check_growable_ids
from kmodels.contracts.checks import guarded_call
from kmodels.layers.key_index import KeyIndex
from kmodels.layers.saved_state import checked_entries
from kmodels.layers.saved_state import entry_checksums

_UNSEEN = ("zeros", "oov", "error")
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


def _row_uniform(seed, start, stop, dim, stream=0):
    """Uniform [0, 1) draws for rows `start..stop-1`, each a function of
    (seed, row, column) only, so a row's values never depend on the table's
    size."""
    rows = np.arange(start, stop, dtype=np.uint64)[:, None]
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

    The table trains with its own row-sparse optimizer (`"sgd"` or `"adam"`,
    lazy Adam as in TensorFlow Addons' `LazyAdam`: only the rows of the
    batch move, their moments live in the layer and grow with the table), so
    a train step costs in proportion to the ids in the batch, not to the
    table. The model's optimizer does not touch the table.

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

    The arguments are checked at construction, with the same `ValueError`
    on every backend: sizes must be integers >= 1 (`2.5`, `"8"` and `True`
    are refused, not truncated), `growth_factor` a finite number > 1, the
    table optimizer's learning rate and epsilon finite and > 0, its betas
    in `[0, 1)`, and its hyperparameter names known.

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
        optimizer: `"adam"` (default), `"sgd"`, or a `keras.optimizers.SGD`
            (no momentum) / `keras.optimizers.Adam` with a constant learning
            rate: the table's sparse optimizer.
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
            with the layer.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: integer tensor of ids, any shape.
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
        - Kingma and Ba, "Adam: A Method for Stochastic Optimization", 2015.
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
        self.unseen = unseen
        self.oov_id = oov_id
        self.mask_zero = mask_zero
        self.seed = seed
        self.key_index = key_index
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
        self.slot_variables = [
            self.add_weight(
                shape=(capacity, self.output_dim),
                initializer="zeros",
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
        return ("momentum", "velocity") if self.optimizer[0] == "adam" else ()

    def _initial_rows(self, start, stop):
        dim = self.output_dim
        kind, args = self._init_kind, self._init_args
        if kind == "zeros":
            rows = np.zeros((stop - start, dim))
        elif kind == "uniform":
            low, high = args
            rows = low + (high - low) * _row_uniform(
                self.seed, start, stop, dim
            )
        else:  # normal, Box-Muller on two independent streams
            mean, stddev = args
            u1 = _row_uniform(self.seed, start, stop, dim, stream=0)
            u2 = _row_uniform(self.seed, start, stop, dim, stream=1)
            rows = mean + stddev * np.sqrt(-2.0 * np.log(u1)) * np.cos(
                2.0 * np.pi * u2
            )
        return rows.astype(self.variable_dtype)

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
            if self.max_capacity is not None and high >= self.max_capacity:
                raise ValueError(
                    f"GrowableEmbedding '{self.name}' reached max_capacity="
                    f"{self.max_capacity}: got id {high}, which needs "
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
        if self.max_capacity is not None:
            new = min(new, self.max_capacity)
        return _round_up(new, self.row_multiple)

    def ensure_capacity(self, ids):
        """Grows the table (eagerly, between steps) so that the concrete
        `ids` fit; returns the new capacity."""
        ids = self.check_ids(ids)
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
        if self.max_capacity is not None and capacity > _round_up(
            self.max_capacity, multiple
        ):
            raise ValueError(
                f"GrowableEmbedding '{self.name}' cannot grow to {capacity} "
                f"rows: max_capacity={self.max_capacity}."
            )
        self._append_rows(old, capacity)
        self.growth_log.append({"from": old, "to": capacity})

    def _append_rows(self, old, capacity):
        growth_backend.append_rows(
            self.embeddings, self._initial_rows(old, capacity)
        )
        for slot in self.slot_variables:
            pad = np.zeros((capacity - old, self.output_dim), slot.dtype)
            growth_backend.append_rows(slot, pad)

    @property
    def growths(self):
        """Number of growths since construction (or load)."""
        return len(self.growth_log)

    # ------------------------------------------------------------------ call
    # Its own rule (and warning) for compiled steps that kmodels did not
    # check: unseen ids get zero vectors, nothing turns NaN.
    _warns_when_unchecked = False

    def __call__(self, *args, **kwargs):
        # Concrete inputs are checked before Keras converts them (JAX casts
        # int64 NumPy ids to int32, wrapping): kmodels.contracts.
        return guarded_call(self, super().__call__, args, kwargs)

    def _check_call_arguments(self, arguments, training):
        if arguments.get("inputs") is not None:
            check_growable_ids(self, arguments.get("inputs"), training)

    def call(self, inputs, training=None):
        ids = inputs
        if not _is_integer_dtype(ids):
            raise TypeError(
                f"GrowableEmbedding '{self.name}' expects integer ids; got "
                f"dtype {keras.backend.standardize_dtype(ids.dtype)}. Map "
                "raw keys to rows with kmodels.layers.KeyIndex."
            )
        concrete = growth_backend.is_concrete(ids) and not _in_stateless()
        # Off inside `kmodels.diagnostics`: no growth, no row update.
        updates = growth_backend.sparse_updates_enabled()
        if concrete:
            checked = self.check_ids(ids)
            if training:
                if updates:
                    self.ensure_capacity(checked)
            elif self.unseen == "error" and checked.size:
                if int(checked.max()) >= self.capacity:
                    raise ValueError(
                        f"GrowableEmbedding '{self.name}' got unseen id "
                        f"{int(checked.max())} at inference (capacity "
                        f'{self.capacity}) and unseen="error".'
                    )
        shape = ops.shape(ids)
        flat = ops.cast(ops.reshape(ids, (-1,)), "int32")
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
            if self.compute_dtype == "float16" and not self._warned_float16:
                self._warned_float16 = True
                warnings.warn(float16_warning(self.name), stacklevel=2)
            if concrete or self.managed_growth:
                # Every id fits: grown just above, or by EmbeddingGrowth
                # before the step.
                flat = ops.clip(flat, 0, capacity - 1)
                rows = growth_backend.sparse_lookup(self, flat)
            else:
                rows = self._unmanaged_lookup(flat, capacity)
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
        rows = ops.cast(rows, self.compute_dtype)
        return ops.reshape(rows, tuple(shape) + (self.output_dim,))

    def _unmanaged_lookup(self, flat, capacity):
        """Training lookup inside a compiled step without `EmbeddingGrowth`:
        the table cannot grow, so ids at or past the capacity (or negative)
        get zero vectors and move no row; the others train as usual."""
        if not self._warned_unmanaged:
            self._warned_unmanaged = True
            warnings.warn(
                unmanaged_growth_warning(self.name, self.capacity),
                stacklevel=3,
            )
        seen = ops.logical_and(flat >= 0, flat < capacity)
        rows = growth_backend.sparse_lookup(
            self, ops.where(seen, flat, 0), seen=seen
        )
        return ops.where(ops.expand_dims(seen, -1), rows, 0)

    def sparse_row_update(
        self, gather, step, ids, grads, capacity=None, seen=None
    ):
        """One step of the table's optimizer on the rows of `ids` only.

        `gather(k, rows)` returns the given rows of the table (`k=0`) or of
        slot `k - 1`: backends pass a sparse read (reading a whole
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
        kind, hyper = self.optimizer
        lr = hyper["learning_rate"]
        old_slots = []
        if kind == "sgd":
            new_rows = current - lr * summed
            new_slots = []
        else:
            b1, b2, eps = hyper["beta_1"], hyper["beta_2"], hyper["epsilon"]
            m = gather(1, rows)
            v = gather(2, rows)
            old_slots = [m, v]
            t = ops.cast(step, self.variable_dtype) + 1.0
            m = b1 * m + (1.0 - b1) * summed
            v = b2 * v + (1.0 - b2) * ops.square(summed)
            alpha = (
                lr * ops.sqrt(1.0 - ops.power(b2, t)) / (1.0 - ops.power(b1, t))
            )
            new_rows = current - alpha * m / (ops.sqrt(v) + eps)
            new_slots = [m, v]
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
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)

    # ---------------------------------------------------------------- saving
    def _entry_names(self):
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
            if entries[name].shape != table.shape:
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
        pad = np.zeros((capacity - saved, self.output_dim))
        growth_backend.resize_variable(
            self.embeddings,
            np.concatenate([table, self._initial_rows(saved, capacity)]),
        )
        for name, slot in zip(self._slot_names(), self.slot_variables):
            values = entries[name]
            growth_backend.resize_variable(
                slot, np.concatenate([values, pad.astype(values.dtype)])
            )
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
    "sgd": {"learning_rate": 0.01},
    "adam": {
        "learning_rate": 0.001,
        "beta_1": 0.9,
        "beta_2": 0.999,
        "epsilon": 1e-7,
    },
}


def _table_optimizer(optimizer):
    """Normalises `optimizer` to `(kind, hyperparameters)`, checked."""
    if isinstance(optimizer, (tuple, list)) and len(optimizer) == 2:
        kind, hyper = optimizer
        return _checked_optimizer(kind, hyper)
    if isinstance(optimizer, dict) and "kind" in optimizer:
        hyper = {k: v for k, v in optimizer.items() if k != "kind"}
        return _checked_optimizer(optimizer["kind"], hyper)
    if isinstance(optimizer, str):
        return _checked_optimizer(optimizer, {})
    if isinstance(optimizer, keras.optimizers.Optimizer):
        kind = type(optimizer).__name__.lower()
        if kind not in _DEFAULTS:
            raise ValueError(
                "GrowableEmbedding's table optimizer must be a "
                f"keras.optimizers.SGD or Adam; got {type(optimizer).__name__}."
            )
        lr = optimizer._learning_rate
        if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError(
                "GrowableEmbedding's table optimizer needs a constant "
                "learning rate; got a schedule."
            )
        hyper = {"learning_rate": float(ops.convert_to_numpy(lr))}
        if kind == "sgd" and optimizer.momentum:
            raise ValueError(
                "GrowableEmbedding's sparse SGD has no momentum; got "
                f"momentum={optimizer.momentum}."
            )
        if kind == "adam":
            if optimizer.amsgrad:
                raise ValueError("GrowableEmbedding's Adam has no amsgrad.")
            hyper.update(
                beta_1=float(optimizer.beta_1),
                beta_2=float(optimizer.beta_2),
                epsilon=float(optimizer.epsilon),
            )
        return _checked_optimizer(kind, hyper)
    raise ValueError(
        f"GrowableEmbedding: unsupported optimizer {optimizer!r}; use 'sgd', "
        "'adam' or a keras.optimizers.SGD / Adam."
    )


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
        if name.startswith("beta"):
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


def _serialize_optimizer(optimizer):
    kind, hyper = optimizer
    return {"kind": kind, **hyper}
