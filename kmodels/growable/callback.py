"""Growth of `GrowableEmbedding` tables inside `model.fit`."""

import keras
import numpy as np

from kmodels.backend import growth as growth_backend
from kmodels.backend import keras_internals
from kmodels.contracts.structure import path_to
from kmodels.growable.embedding import GrowableEmbedding
from kmodels.growable.lookup import repeated_call_error


class EmbeddingGrowth(keras.callbacks.Callback):
    """Grows every `GrowableEmbedding` of the model between train steps.

    No backend can reshape a variable inside a compiled step. Before each
    step of `fit`, a hook takes the batch the step is about to consume,
    checks its ids (the same errors on every backend), grows the tables that
    need it (old rows and optimizer slots kept) and lets the step recompile.
    Growth is geometric, so growths stay within
    `ceil(log(final / initial) / log(growth_factor))` per table. Tables with
    `optimizer=None` follow the model's optimizer; rows a bounded `KeyIndex`
    gave to new keys are restarted before the step that trains them.

    Args:
        ids: optional dict from a `GrowableEmbedding`'s name to a function
            `x -> ids` of a batch's inputs or to a key of a dict of inputs.
            By default the ids are found through the functional graph.
        verbose: int, default `0`. 1 prints each growth.

    Attributes:
        log: list of dicts `{"step", "layer", "from", "to", "max_id"}`, one
            per table growth, `step` counting train batches of this fit.
        growths: number of table growths.
        recompilations: number of steps that had to recompile (a step may
            grow several tables at once). On JAX the compiled step holds
            each table padded to a reserve (`min(growth_factor ** 2, 4)`
            times the capacity a growth reached, more after earlier
            reserves), so a growth within it is a value update: nothing
            recompiles, and it is not counted.
        reset_log: list of dicts `{"step", "layer", "rows"}`, one per step
            and table that restarted rows given to new keys by a bounded
            `key_index` (`rows`: sorted int64 NumPy array), `step` the
            train batch of this fit the rows were restarted before.
        evicted_resets: number of rows restarted so (all tables).

    Example:

    ```python
    model.fit(x, y, callbacks=[kmodels.callbacks.EmbeddingGrowth()])
    ```

    See docs/growable_embedding.md, section "How growth works".
    """

    def __init__(self, ids=None, verbose=0):
        super().__init__()
        self.ids = dict(ids or {})
        self.verbose = verbose
        self.log = []
        self.reset_log = []
        self.recompilations = 0
        self._steps = 0
        self._unwrap = None
        self._growth_model = None
        self._locators = {}

    @property
    def growths(self):
        return len(self.log)

    @property
    def evicted_resets(self):
        return sum(len(entry["rows"]) for entry in self.reset_log)

    def set_model(self, model):
        super().set_model(model)
        # Kept apart from `self.model`: on JAX that property syncs the
        # training state on every access.
        self._growth_model = model

    def on_train_begin(self, logs=None):
        model = self._growth_model
        self._tables = [
            layer
            for layer in keras_internals.sublayers(model)
            if isinstance(layer, GrowableEmbedding)
        ]
        if not self._tables:
            raise ValueError(
                "EmbeddingGrowth found no GrowableEmbedding in model "
                f"'{model.name}'."
            )
        for table in self._tables:
            _check_one_call(model, table)
            # A key index may have been attached after construction.
            table.check_key_index()
        self._locators = {t.name: self._locator(model, t) for t in self._tables}
        retrace = False
        for table in self._tables:
            if not table.built:
                table.build()
            # optimizer=None: the model's optimizer, read now.
            if table.optimizer is None:
                retrace |= table.follow_optimizer(model.optimizer)
        for table in self._tables:
            table.managed_growth = True
        self._steps = 0
        self._unwrap = growth_backend.wrap_train_function(
            model, self, retrace=retrace, tables=self._tables
        )

    def on_train_end(self, logs=None):
        self._release()

    def __del__(self):
        try:
            self._release()
        except Exception:
            pass

    def _release(self):
        if self._unwrap is not None:
            self._unwrap()
            self._unwrap = None
        for table in getattr(self, "_tables", []):
            table.managed_growth = False

    # -------------------------------------------- called by the backend hook
    def plan(self, batches):
        """Checks the ids of `batches` and returns `{table: capacity}` for
        the tables that must grow before the step."""
        plan = {}
        for batch in batches:
            x, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
            for table in self._tables:
                ids = table.check_ids(self._locators[table.name](x))
                if not ids.size:
                    continue
                max_id = int(ids.max())
                target = table.required_capacity(max_id)
                if target > plan.get(table, (table.capacity, -1))[0]:
                    plan[table] = (target, max_id)
                elif table in plan:
                    plan[table] = (plan[table][0], max(max_id, plan[table][1]))
        self._steps += 1
        return plan

    def apply(self, plan):
        """Grows the tables of `plan` (between steps) and logs it."""
        model = self._growth_model
        recompiles = False
        for table, (capacity, max_id) in plan.items():
            old = table.capacity
            # On JAX the step holds the table padded to a reserve: a growth
            # within it keeps the compiled step.
            compiled = growth_backend.compiled_rows(table)
            table.grow_to(capacity)
            recompiles |= growth_backend.compiled_rows(table) != compiled
            entry = {
                "step": self._steps - 1,
                "layer": table.name,
                "from": old,
                "to": table.capacity,
                "max_id": max_id,
            }
            self.log.append(entry)
            if self.verbose:
                print(
                    f"EmbeddingGrowth: step {entry['step']}: '{table.name}' "
                    f"{old} -> {table.capacity} rows (max id {max_id})"
                )
        if recompiles:
            self.recompilations += 1
        # Compiled evaluation and prediction captured the old shapes.
        keras_internals.drop_step_functions(model, ("test", "predict"))

    def take_resets(self):
        """`{table: rows}`: the rows each table's bounded `key_index` gave
        to new keys since the last call (taken from the index)."""
        resets, taken = {}, {}
        for table in self._tables:
            index = table.key_index
            take = getattr(index, "take_reset_rows", None)
            if take is None:
                continue
            # Tables that share an index (values, biases) all restart.
            if id(index) not in taken:
                taken[id(index)] = np.asarray(take(), np.int64).reshape(-1)
            # A pipeline that looks keys up ahead of the step (`PyDataset`
            # workers) may evict and reassign rows the table has not grown
            # to yet: those hold no training, and the growth that reaches
            # them starts them from the initializer, as a restart would.
            rows = taken[id(index)]
            rows = rows[rows < table.capacity]
            if rows.size:
                resets[table] = rows
        return resets

    def apply_resets(self, resets):
        """Restarts the rows of `resets` (between steps) and logs them."""
        for table, rows in resets.items():
            rows = table.reset_rows(rows)
            self.reset_log.append(
                {"step": self._steps - 1, "layer": table.name, "rows": rows}
            )
            if self.verbose:
                print(
                    f"EmbeddingGrowth: step {self._steps - 1}: "
                    f"'{table.name}' restarted {len(rows)} rows of evicted "
                    "keys"
                )

    # ------------------------------------------------------------- locating
    def _locator(self, model, table):
        given = self.ids.get(table.name)
        if callable(given):
            return given
        if given is not None:
            return lambda x, key=given: x[key]
        struct = keras_internals.inputs_struct(model)
        if struct is not None:
            for node in keras_internals.inbound_nodes(table):
                # The ids only (not a bag's `weights`); a table shared by
                # several features takes a list of ids in one call.
                found = [path_to(struct, tensor) for tensor in _node_ids(node)]
                if len(found) == 1 and found[0] is not None:
                    return found[0]
                if found and all(f is not None for f in found):
                    return lambda x, fs=found: _concatenated(x, fs)
        inputs = getattr(model, "inputs", None) or []
        if len(inputs) == 1:
            return lambda x: keras.tree.flatten(x)[0]
        raise ValueError(
            f"EmbeddingGrowth cannot tell which input of model '{model.name}' "
            f"holds the ids of GrowableEmbedding '{table.name}'. Pass "
            f"EmbeddingGrowth(ids={{'{table.name}': lambda x: ...}})."
        )


def _node_ids(node):
    """The tensors a call of a `GrowableEmbedding` took as ids."""
    args = node.arguments.args
    ids = args[0] if args else node.arguments.kwargs.get("inputs")
    return keras.tree.flatten(ids)


def _concatenated(x, locators):
    return np.concatenate(
        [
            np.asarray(growth_backend.host_array(f(x))).reshape(-1)
            for f in locators
        ]
    )


def _check_one_call(model, table):
    """A table's sparse update runs once per call: two calls in one step
    would each apply the optimizer (and, on JAX, add two updated tables).
    Refuses a functional model that calls a table more than once."""
    calls = keras_internals.calls_in_graph(model, table)
    if calls > 1:
        raise ValueError(
            repeated_call_error(
                table.name, f"{calls} times in model '{model.name}'"
            )
        )
