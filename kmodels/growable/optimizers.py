"""The row-sparse optimizers of `kmodels.layers.GrowableEmbedding`.

One class per rule, as `keras.optimizers`: `SparseSGD`, `SparseAdagrad`,
`SparseAdam`. Each holds its hyperparameters (checked at construction), its
per-row slots and their initial values, its update (`keras.ops` only: the
backward pass of every backend's `sparse_lookup` runs it on the rows of
the batch), its construction from the Keras optimizer it follows, and its
config. Each follows the equations of that Keras optimizer, applied to the
rows the batch names ("lazy": rows absent from the batch, their slots
included, do not move).

A new rule is one subclass of `SparseOptimizer` with a `kind`, the
`keras_name` of the Keras optimizer it follows, its hyperparameters as
constructor arguments (stored under their own names), `slots` and
`update`; `get` then accepts it by kind, pair, config and Keras optimizer.
"""

import inspect

import keras
from keras import ops

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_float
from kmodels.backend import growth as growth_backend
from kmodels.backend import keras_internals

_OWNER = "GrowableEmbedding"
# The sparse optimizers by `kind`, in the order they are defined.
_REGISTRY = {}
# Slot variables of a table with `optimizer=None`, in the order the layer
# creates (and saves) them: these first, then the slots of rules defined
# later, in their order.
_FOLLOWED_SLOTS = ("momentum", "velocity", "accumulator")


class SparseOptimizer:
    """Base class of `GrowableEmbedding`'s row-sparse optimizers.

    A subclass sets `kind` (its name in configs and `optimizer="..."`),
    `keras_name` (the `keras.optimizers` class it follows), `slots` (every
    slot it may keep) and implements `update`; its constructor takes its
    hyperparameters, `learning_rate` first, and stores each under its own
    name.

    Args:
        learning_rate: float > 0, or a
            `keras.optimizers.schedules.LearningRateSchedule` (also as the
            dict `keras.optimizers.schedules.serialize` writes), evaluated
            at the table's own `step`.
    """

    kind = None
    keras_name = None
    slots = ()
    # Keras optimizer settings the sparse rules do not apply.
    unsupported_settings = (
        "weight_decay",
        "clipnorm",
        "clipvalue",
        "global_clipnorm",
        "use_ema",
        "gradient_accumulation_steps",
    )

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.kind is not None:
            _REGISTRY[cls.kind] = cls

    def __init__(self, learning_rate):
        self.learning_rate = _checked_learning_rate(learning_rate)

    @property
    def slot_names(self):
        """Names of the per-row slots this rule keeps, in the order
        `update` takes and returns them."""
        return self.slots

    def slot_initial_value(self, name):
        """Value of a fresh row of slot `name` (zero unless a rule says
        otherwise)."""
        return 0.0

    def learning_rate_at(self, step, dtype):
        """The learning rate of the update that follows `step` earlier
        updates: the schedule evaluated at `step` (as Keras evaluates it at
        `optimizer.iterations`), or the constant."""
        rate = self.learning_rate
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return ops.cast(rate(ops.cast(step, "int32")), dtype)
        return rate

    def update(self, step, rows, slots, grads, dtype):
        """One update of `rows` (the distinct rows of a batch) and their
        slots.

        Args:
            step: updates taken before this one (the table's step counter).
            rows: current values of the rows.
            slots: their slot rows, in the order of `slot_names`.
            grads: the summed gradient of each row.
            dtype: the variables' dtype.

        Returns:
            `(new_rows, new_slots)`.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement `update`."
        )

    def update_in_place(self, step, rows, slots, grads, dtype):
        """`update` on rows and slots the caller gathered for it (fresh
        copies, which the rule may overwrite): torch's backward pass calls
        it. A rule may then use an in-place form of its update from
        `kmodels.backend.growth`; by default it runs `update`."""
        return self.update(step, rows, slots, grads, dtype)

    @classmethod
    def hyperparameter_names(cls):
        """The constructor's arguments, `learning_rate` first."""
        signature = inspect.signature(cls.__init__)
        return tuple(name for name in signature.parameters if name != "self")

    def _hyperparameters(self):
        return {n: getattr(self, n) for n in self.hyperparameter_names()}

    def get_config(self):
        """The hyperparameters (a schedule serialized with
        `keras.optimizers.schedules.serialize`)."""
        config = self._hyperparameters()
        rate = config["learning_rate"]
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            config["learning_rate"] = keras.optimizers.schedules.serialize(rate)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    @classmethod
    def from_keras(cls, optimizer, where):
        """The rule of Keras `optimizer` (an instance of `keras_name`): its
        hyperparameters and learning rate (a schedule object kept as is).
        Raises a `ValueError` that starts with `where` for settings the
        rule does not apply."""
        for setting in cls.unsupported_settings:
            value = getattr(optimizer, setting, None)
            if value:
                raise ValueError(
                    f"{where} must be a {_keras_names()} without {setting}: "
                    f"GrowableEmbedding's sparse {cls.kind} does not apply "
                    f"it; got {setting}={value!r}."
                )
        rate = keras_internals.learning_rate_or_schedule(optimizer)
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
        names = [n for n in cls.hyperparameter_names() if n != "learning_rate"]
        hyper = {n: getattr(optimizer, n) for n in names}
        return cls(learning_rate=rate, **hyper)

    def __eq__(self, other):
        # The same rule: a traced step that applies one applies the other.
        return type(self) is type(other) and (
            self._hyperparameters() == other._hyperparameters()
        )

    __hash__ = None

    def __repr__(self):
        hyper = ", ".join(
            f"{k}={v!r}" for k, v in self._hyperparameters().items()
        )
        return f"{type(self).__name__}({hyper})"


class SparseSGD(SparseOptimizer):
    """Row-sparse SGD, with optional (Nesterov) momentum, as
    `keras.optimizers.SGD`: `m = mu m - lr g`, then `w += m` (Nesterov:
    `w += mu m - lr g`); without momentum `w -= lr g` and no slot.

    Args:
        learning_rate: float > 0 or a `LearningRateSchedule`.
        momentum: float in `[0, 1]`.
        nesterov: bool.
    """

    kind = "sgd"
    keras_name = "SGD"
    slots = ("momentum",)

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False):
        super().__init__(learning_rate)
        self.momentum = check_float(
            momentum, "optimizer.momentum", _OWNER, 0, 1
        )
        self.nesterov = check_bool(nesterov, "optimizer.nesterov", _OWNER)

    @property
    def slot_names(self):
        return self.slots if self.momentum else ()

    def update(self, step, rows, slots, grads, dtype):
        lr = self.learning_rate_at(step, dtype)
        if not slots:
            return rows - lr * grads, []
        mu = self.momentum
        (m,) = slots
        m = mu * m - lr * grads
        if self.nesterov:
            return rows + mu * m - lr * grads, [m]
        return rows + m, [m]


class SparseAdagrad(SparseOptimizer):
    """Row-sparse Adagrad, as `keras.optimizers.Adagrad`: `a += g^2`,
    `w -= lr g / sqrt(a + eps)`.

    Args:
        learning_rate: float > 0 or a `LearningRateSchedule`.
        initial_accumulator_value: float >= 0, the accumulator of a fresh
            row.
        epsilon: float > 0.
    """

    kind = "adagrad"
    keras_name = "Adagrad"
    slots = ("accumulator",)

    def __init__(
        self,
        learning_rate=0.001,
        initial_accumulator_value=0.1,
        epsilon=1e-7,
    ):
        super().__init__(learning_rate)
        self.initial_accumulator_value = check_float(
            initial_accumulator_value,
            "optimizer.initial_accumulator_value",
            _OWNER,
            0,
        )
        self.epsilon = _checked_epsilon(epsilon)

    def slot_initial_value(self, name):
        return self.initial_accumulator_value

    def update(self, step, rows, slots, grads, dtype):
        lr = self.learning_rate_at(step, dtype)
        (acc,) = slots
        acc = acc + ops.square(grads)
        return rows - lr * grads / ops.sqrt(acc + self.epsilon), [acc]


class SparseAdam(SparseOptimizer):
    """Row-sparse ("lazy") Adam, as TensorFlow Addons' `LazyAdam`, with the
    equations of `keras.optimizers.Adam` and `t = step + 1`:
    `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
    `w -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)`.

    Args:
        learning_rate: float > 0 or a `LearningRateSchedule`.
        beta_1: float in `[0, 1)`.
        beta_2: float in `[0, 1)`.
        epsilon: float > 0.
    """

    kind = "adam"
    keras_name = "Adam"
    slots = ("momentum", "velocity")
    unsupported_settings = SparseOptimizer.unsupported_settings + ("amsgrad",)

    def __init__(
        self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7
    ):
        super().__init__(learning_rate)
        self.beta_1 = _checked_beta(beta_1, "optimizer.beta_1")
        self.beta_2 = _checked_beta(beta_2, "optimizer.beta_2")
        self.epsilon = _checked_epsilon(epsilon)

    def update(self, step, rows, slots, grads, dtype):
        lr = self.learning_rate_at(step, dtype)
        b1, b2, eps = self.beta_1, self.beta_2, self.epsilon
        m, v = slots
        t = ops.cast(step, dtype) + 1.0
        m = b1 * m + (1.0 - b1) * grads
        v = b2 * v + (1.0 - b2) * ops.square(grads)
        alpha = lr * ops.sqrt(1.0 - ops.power(b2, t)) / (1.0 - ops.power(b1, t))
        return rows - alpha * m / (ops.sqrt(v) + eps), [m, v]

    def update_in_place(self, step, rows, slots, grads, dtype):
        if not isinstance(self.learning_rate, (int, float)):
            return self.update(step, rows, slots, grads, dtype)
        m, v = slots
        growth_backend.adam_rows_in_place(
            rows,
            m,
            v,
            grads,
            step,
            self.learning_rate,
            self.beta_1,
            self.beta_2,
            self.epsilon,
        )
        return rows, [m, v]


def get(identifier):
    """The `SparseOptimizer` of a `GrowableEmbedding(optimizer=...)`
    argument, checked, or `None` (follow the model's optimizer).

    Args:
        identifier: `None`; a `SparseOptimizer`; a kind (`"adam"`); a
            `(kind, hyperparameters)` pair; a config dict
            `{"kind": ..., **hyperparameters}` (what `serialize` writes);
            or a Keras optimizer of a kind a rule follows.
    """
    if identifier is None or isinstance(identifier, SparseOptimizer):
        return identifier
    if isinstance(identifier, (tuple, list)) and len(identifier) == 2:
        kind, hyper = identifier
        return _from_kind(kind, hyper)
    if isinstance(identifier, dict) and "kind" in identifier:
        hyper = {k: v for k, v in identifier.items() if k != "kind"}
        return _from_kind(identifier["kind"], hyper)
    if isinstance(identifier, str):
        return _from_kind(identifier, {})
    if isinstance(identifier, keras.optimizers.Optimizer):
        return from_keras_optimizer(
            identifier, "GrowableEmbedding's table optimizer"
        )
    kinds = ", ".join(repr(kind) for kind in _REGISTRY)
    raise ValueError(
        f"GrowableEmbedding: unsupported optimizer {identifier!r}; use "
        f"{kinds}, a {_keras_names()}, or None (follow the model's "
        "optimizer)."
    )


def serialize(optimizer):
    """`None`, or `{"kind": ..., **optimizer.get_config()}`: the form
    `get` reads back (and `GrowableEmbedding` configs hold)."""
    if optimizer is None:
        return None
    return {"kind": optimizer.kind, **optimizer.get_config()}


def from_keras_optimizer(optimizer, where):
    """The `SparseOptimizer` following Keras `optimizer`; `where` starts
    the error messages ("... must be a keras.optimizers.SGD, ...")."""
    name = type(optimizer).__name__
    rule = None
    for cls in _REGISTRY.values():
        if cls.keras_name.lower() == name.lower():
            rule = cls
    if not isinstance(optimizer, keras.optimizers.Optimizer) or rule is None:
        raise ValueError(
            f"{where} must be a {_keras_names()} (the row-sparse rules "
            f"GrowableEmbedding has); got {name}. Give the table its own "
            "optimizer, e.g. optimizer='adagrad'."
        )
    return rule.from_keras(optimizer, where)


def followed_slot_names():
    """Every slot a followed rule may use (`optimizer=None`), in the order
    the layer creates and saves them."""
    names = list(_FOLLOWED_SLOTS)
    for cls in _REGISTRY.values():
        names += [name for name in cls.slots if name not in names]
    return tuple(names)


def _from_kind(kind, hyper):
    """The rule `kind` with hyperparameters `hyper` (the others at their
    defaults), each one checked: a negative learning rate would train
    backwards, a `beta` of 1 divides by zero, an unknown name would be
    ignored."""
    if isinstance(kind, str):
        kind = kind.lower()
    kind = check_choice(kind, "optimizer", _OWNER, tuple(_REGISTRY))
    if not isinstance(hyper, dict):
        raise ValueError(
            f"{_OWNER}: the hyperparameters of `optimizer` must be a dict; "
            f"got {type(hyper).__name__}."
        )
    rule = _REGISTRY[kind]
    names = rule.hyperparameter_names()
    unknown = sorted(set(hyper) - set(names), key=str)
    if unknown:
        raise ValueError(
            f"{_OWNER}: `optimizer` {kind!r} takes hyperparameters "
            f"{sorted(names)}; got unknown {unknown}."
        )
    return rule(**hyper)


def _keras_names():
    """ "keras.optimizers.SGD, Adagrad or Adam": the Keras optimizers the
    rules follow."""
    names = [cls.keras_name for cls in _REGISTRY.values()]
    if len(names) == 1:
        return f"keras.optimizers.{names[0]}"
    return f"keras.optimizers.{', '.join(names[:-1])} or {names[-1]}"


def _checked_learning_rate(value):
    """A learning rate: a finite number > 0, or a
    `keras.optimizers.schedules.LearningRateSchedule` (also as the dict
    `keras.optimizers.schedules.serialize` writes, from a config)."""
    schedules = keras.optimizers.schedules
    if isinstance(value, dict):
        value = schedules.deserialize(value)
    if isinstance(value, schedules.LearningRateSchedule):
        return value
    return check_float(
        value, "optimizer.learning_rate", _OWNER, 0, exclusive_minimum=True
    )


def _checked_epsilon(value):
    return check_float(
        value, "optimizer.epsilon", _OWNER, 0, exclusive_minimum=True
    )


def _checked_beta(value, label):
    """A float in `[0, 1)`: a beta of 1 divides by zero."""
    try:
        number = check_float(value, label, _OWNER, 0, 1)
    except ValueError:
        number = 1.0
    if number == 1.0:
        raise ValueError(
            f"{_OWNER}: `{label}` must be a finite number in [0, 1); "
            f"got {value!r} ({type(value).__name__})."
        )
    return number
