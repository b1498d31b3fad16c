"""Decoding constraints of `Translator.generate`, as processors.

Each constraint is one `Processor` subclass (the shape of Hugging Face's
`LogitsProcessor`s): the keyword option it reads, the check of its value,
and one `apply(logits, generated, count, end_id)` in `keras.ops`,
traceable, that takes TensorFlow and JAX tensors and torch's (the native
torch loops call the same classes). `check` turns a call's keyword options
into one `Constraints`: the active processors, composed in order by
`process`, and the length penalty, a score normaliser (`LengthPenalty`).
Adding a constraint is one class here, listed in `PROCESSORS`, plus its
rule in the NumPy oracle (`kmodels.testing.oracle.search`).

Two kinds of processors:

- a mask (`transforms = False`) only removes candidates, writing `-inf`:
  a sequence's score stays the sum of the model's own log-probabilities
  (`log_softmax` over every id but the padding id), without
  renormalisation over the allowed ids. A hypothesis with no allowed id
  left stops, writing padding, and scores `-inf`;
- a transform (`transforms = True`) changes the model's logits before the
  `log_softmax`: the scores are those of the changed distribution
  (`repetition_penalty`).

What a processor reads per call (the banned ids, the minimum length, the
penalty, the prefix) are its `values`: inputs of the compiled loop, so
that changing them does not retrace; its `key` is what the loop's
structure depends on (which processors are on, the n-gram size).
"""

import copy
import math
import numbers

import numpy as np
from keras import ops

from kmodels.arguments import ArgumentTypeError
from kmodels.arguments import check_float
from kmodels.arguments import check_int

NEG_INF = float("-inf")


class Processor:
    """One decoding constraint (subclasses below; see the module's
    docstring).

    Class attributes:
        option: str, the keyword option of `generate` it reads.
        default: the option's value when off.
        transforms: bool, it changes the logits (the scores follow)
            rather than only writing `-inf` at refused ids.
        needs_history: bool, `apply` reads `generated`.

    Attributes:
        values: tuple of NumPy values (or the compiled loop's tensors,
            after `bind`) that `apply` reads.
        key: hashable, the structure of the loop it needs.
    """

    option = None
    default = None
    transforms = False
    needs_history = False

    def __init__(self, values=()):
        self.values = tuple(values)

    @property
    def key(self):
        return type(self).__name__

    @classmethod
    def check(cls, value, max_length, vocabulary_size, owner):
        """The checked value, `None` when it turns the constraint off;
        raises naming `cls.option`."""
        raise NotImplementedError

    @classmethod
    def build(cls, value, max_length, vocabulary_size):
        """The processor for a checked (not `None`) value."""
        raise NotImplementedError

    def bind(self, values):
        """A copy reading `values` (the loop's tensors) instead."""
        bound = copy.copy(self)
        bound.values = tuple(values)
        return bound

    def apply(self, logits, generated, count, end_id):
        """`logits` float32 `(rows, vocabulary)`, the padding id (column 0)
        at `-inf`, for the `count + 1`-th generated id; `generated` int
        `(rows, length)` holds the ids generated so far at positions
        `< count` (0 after them); `count` an int scalar (tensor or Python
        int). Returns the processed logits."""
        raise NotImplementedError


class BannedIds(Processor):
    """`banned_ids`: ids never generated (`-inf`)."""

    option = "banned_ids"

    @classmethod
    def check(cls, value, max_length, vocabulary_size, owner):
        ids = _check_id_list(value, cls.option, owner, 0, vocabulary_size)
        left = set(range(1, vocabulary_size)) - set(ids)
        if not left:
            raise ValueError(
                f"{owner}: `banned_ids` bans every id the model can "
                f"generate (1 to {vocabulary_size - 1}; the padding id 0 is "
                f"never generated); got {sorted(set(ids))}."
            )
        return tuple(sorted(set(ids))) or None

    @classmethod
    def build(cls, value, max_length, vocabulary_size):
        banned = np.zeros(vocabulary_size, bool)
        banned[list(value)] = True
        return cls((banned,))

    def apply(self, logits, generated, count, end_id):
        banned = ops.convert_to_tensor(self.values[0])
        return ops.where(banned[None], NEG_INF, logits)


class MinLength(Processor):
    """`min_length`: the end id is refused while fewer than
    `min_length - 1` ids have been generated."""

    option = "min_length"
    default = 0

    @classmethod
    def check(cls, value, max_length, vocabulary_size, owner):
        value = check_int(value, cls.option, owner, 0, type_error=True)
        if value > max_length:
            raise ValueError(
                f"{owner}: `min_length` must be <= max_length ({max_length}):"
                f" no output could be that long; got {value}."
            )
        return value if value > 1 else None

    @classmethod
    def build(cls, value, max_length, vocabulary_size):
        return cls((np.int32(value),))

    def apply(self, logits, generated, count, end_id):
        ids = ops.arange(ops.shape(logits)[-1], dtype="int32")
        # The end id would be the (count + 1)-th generated id.
        short = ops.logical_and(ids == end_id, count + 1 < self.values[0])
        return ops.where(short[None], NEG_INF, logits)


class NoRepeatNgram(Processor):
    """`no_repeat_ngram_size`: no n-gram of that many generated ids occurs
    twice in a sequence."""

    option = "no_repeat_ngram_size"
    default = 0
    needs_history = True

    def __init__(self, size):
        super().__init__()
        self.size = size

    @property
    def key(self):
        return (type(self).__name__, self.size)

    @classmethod
    def check(cls, value, max_length, vocabulary_size, owner):
        value = check_int(value, cls.option, owner, 0, type_error=True)
        return value or None

    @classmethod
    def build(cls, value, max_length, vocabulary_size):
        return cls(value)

    def apply(self, logits, generated, count, end_id):
        # An n-gram starting at position `j` repeats when its first
        # `size - 1` ids equal the row's last `size - 1` ones and it ended
        # before them (`j + size - 1 < count`): its last id is refused,
        # written as `-inf` with one scatter (the windows that do not
        # match write column 0, the padding id, `-inf` already):
        # O(rows * windows), not O(rows * windows * vocabulary).
        size = self.size
        length = generated.shape[1]
        windows = length - size + 1
        if windows <= 0:
            return logits
        generated = ops.cast(generated, "int32")
        rows = ops.shape(generated)[0]
        match = ops.ones((rows, windows), dtype="bool")
        for k in range(size - 1):
            at = ops.clip(count - size + 1 + k, 0, length - 1)
            last = ops.take(generated, ops.reshape(at, (1,)), axis=1)
            match = ops.logical_and(
                match, generated[:, k : k + windows] == last
            )
        started = ops.arange(windows, dtype="int32")
        match = ops.logical_and(match, (started <= count - size)[None])
        following = generated[:, size - 1 : size - 1 + windows]
        indices = _row_column_pairs(ops.where(match, following, 0), rows)
        return ops.scatter_update(
            logits,
            indices,
            ops.full((ops.shape(indices)[0],), NEG_INF, logits.dtype),
        )


class RepetitionPenalty(Processor):
    """`repetition_penalty` (CTRL, Keskar et al., 2019; Hugging Face's
    `RepetitionPenaltyLogitsProcessor`): the logit of every id the row has
    generated already is divided by the penalty if positive, multiplied by
    it otherwise. A transform: the scores are those of the penalised
    logits."""

    option = "repetition_penalty"
    default = 1.0
    transforms = True
    needs_history = True

    @classmethod
    def check(cls, value, max_length, vocabulary_size, owner):
        value = check_float(
            value,
            cls.option,
            owner,
            0.0,
            exclusive_minimum=True,
            type_error=True,
        )
        return None if value == 1.0 else value

    @classmethod
    def build(cls, value, max_length, vocabulary_size):
        return cls((np.float32(value),))

    def apply(self, logits, generated, count, end_id):
        generated = ops.cast(generated, "int32")
        rows, length = ops.shape(generated)[0], generated.shape[1]
        written = ops.arange(length, dtype="int32")[None] < count
        # Each generated id scattered into its row (later positions into
        # column 0, the padding id, `-inf` whatever the penalty).
        columns = ops.where(written, generated, 0)
        indices = _row_column_pairs(columns, rows)
        seen = ops.scatter_update(
            ops.zeros(ops.shape(logits), "float32"),
            indices,
            ops.ones((ops.shape(indices)[0],), "float32"),
        )
        penalty = ops.cast(self.values[0], logits.dtype)
        penalised = ops.where(logits > 0, logits / penalty, logits * penalty)
        return ops.where(seen > 0, penalised, logits)


class ForcedPrefix(Processor):
    """`prefix` (CTranslate2's `target_prefix`): the first `len(prefix)`
    generated ids are these. A mask: every other id is refused there, and
    the score sums the model's own log-probabilities of the forced ids."""

    option = "prefix"

    @classmethod
    def check(cls, value, max_length, vocabulary_size, owner):
        ids = _check_id_list(value, cls.option, owner, 1, vocabulary_size)
        if len(ids) > max_length:
            raise ValueError(
                f"{owner}: `prefix` must hold at most max_length "
                f"({max_length}) ids; got {len(ids)}."
            )
        return ids or None

    @classmethod
    def build(cls, value, max_length, vocabulary_size):
        padded = np.zeros(max_length, "int32")
        padded[: len(value)] = value
        return cls((padded, np.int32(len(value))))

    def apply(self, logits, generated, count, end_id):
        prefix, size = self.values
        prefix = ops.convert_to_tensor(prefix)
        at = ops.clip(count, 0, ops.shape(prefix)[0] - 1)
        forced = ops.take(prefix, ops.reshape(at, (1,)), axis=0)
        ids = ops.arange(ops.shape(logits)[-1], dtype="int32")
        refused = ops.logical_and(ids != forced, count < size)
        return ops.where(refused[None], NEG_INF, logits)


# The processors, in the order they apply (and check).
PROCESSORS = (MinLength, NoRepeatNgram, BannedIds, RepetitionPenalty)
PROCESSORS += (ForcedPrefix,)


def process(processors, logits, generated, count, end_id):
    """`logits` after every processor of `processors`, in order."""
    for processor in processors:
        logits = processor.apply(logits, generated, count, end_id)
    return logits


class LengthPenalty:
    """`length_penalty`: finished scores are divided by `length **
    length_penalty` (HF `generate`'s and fairseq's definition), `length`
    counting the generated ids with the end id (`max_length` for a
    sequence cut there). Not a processor: it ranks finished sequences."""

    option = "length_penalty"
    default = 0.0
    key = "LengthPenalty"

    def __init__(self, values):
        self.values = tuple(values)

    @classmethod
    def check(cls, value, max_length, vocabulary_size, owner):
        value = _check_length_penalty(value, owner, max_length)
        return value or None

    @classmethod
    def build(cls, value, max_length, vocabulary_size):
        return cls((np.float32(value),))

    bind = Processor.bind

    def normalise(self, scores, ids, max_length):
        """`scores / length ** length_penalty`; `ids` as `generate`
        returns them (the end id and what follows written as 0):
        `length = min(nonzero + 1, max_length)`."""
        penalty = ops.cast(self.values[0], "float32")
        real = ops.sum(ops.cast(ids != 0, "float32"), axis=-1)
        length = ops.minimum(real + 1.0, float(max_length))
        return scores / ops.power(length, penalty)


class Constraints:
    """A call's checked constraints (`check`): its processors and its
    length penalty. `Constraints()` has none: the unconstrained loop,
    exactly.

    Attributes:
        processors: tuple of `Processor`s, in `PROCESSORS`' order.
        normaliser: a `LengthPenalty`, or None.
        options: dict, the options that are on, as checked (JSON values:
            what `Translator.search_step` takes back).
        active: bool, any constraint is on.
        needs_history: bool, a processor reads the ids generated so far.
        key: hashable, the compiled loop's structure.
        values: tuple of every processor's `values` (and the normaliser's),
            inputs of the compiled loop; `with_values` swaps in its tensors.
    """

    def __init__(self, processors=(), normaliser=None, options=None):
        self.processors = tuple(processors)
        self.normaliser = normaliser
        self.options = dict(options or {})
        parts = self.processors + ((normaliser,) if normaliser else ())
        self._parts = parts
        self.active = bool(parts)
        self.needs_history = any(p.needs_history for p in self.processors)
        self.key = tuple(p.key for p in parts)
        self.values = tuple(v for p in parts for v in p.values)

    def with_values(self, values):
        """A copy whose parts read `values` (e.g. a compiled loop's input
        tensors, in the order of `self.values`) instead of their own."""
        values, parts = list(values), []
        for part in self._parts:
            n = len(part.values)
            parts.append(part.bind(values[:n]))
            values = values[n:]
        normaliser = parts.pop() if self.normaliser else None
        return Constraints(parts, normaliser, self.options)

    def transform(self, logits, generated, count, end_id):
        """The logits the model's scores are taken from: the transforms
        (`transforms = True`) applied. Traceable; torch tensors on torch."""
        return process(
            [p for p in self.processors if p.transforms],
            logits,
            generated,
            count,
            end_id,
        )

    def refuse(self, logits, generated, count, end_id):
        """`logits` (the padding id, column 0, at `-inf`) with `-inf` at
        the ids the masks refuse as the `count + 1`-th generated id.

        Example:

        >>> import numpy as np
        >>> limits = check(dict(banned_ids=(4,)), 2, 6, "example")
        >>> logits = np.array([[-np.inf, 1, 2, 3, 4, 5]], "float32")
        >>> np.asarray(limits.refuse(logits, np.zeros((1, 2), "int32"), 0, 5))
        array([[-inf,   1.,   2.,   3., -inf,   5.]], dtype=float32)
        """
        return process(
            [p for p in self.processors if not p.transforms],
            logits,
            generated,
            count,
            end_id,
        )

    def normalise(self, scores, ids, max_length):
        """`scores` divided by the length penalty (unchanged without)."""
        if self.normaliser is None:
            return scores
        return self.normaliser.normalise(scores, ids, max_length)


OPTIONS = tuple(p.option for p in (LengthPenalty, *PROCESSORS))


def check(options, max_length, vocabulary_size, owner):
    """Checks a call's constraint options (a dict: `length_penalty`,
    `min_length`, `no_repeat_ngram_size`, `banned_ids`,
    `repetition_penalty`, `prefix`; any of them) and returns `Constraints`.

    Raises a `ValueError` naming the argument, what was expected and what
    arrived (an `ArgumentTypeError`, also a `TypeError`, for a wrong type
    and for an unknown option): a non-finite `length_penalty`, or one with
    `max_length ** |length_penalty| > 1e20` (see `penalty_bound`: float32
    would turn the normalised scores into -0.0 or -inf), a negative
    `min_length` or `no_repeat_ngram_size`, `min_length > max_length`,
    banned ids out of `[0, vocabulary_size)` or covering every id but the
    padding id, ids that are not a flat sequence (`[[4, 5]]`), a
    `repetition_penalty` that is not a finite number > 0, prefix ids out
    of `[1, vocabulary_size)` or more of them than `max_length`.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ArgumentTypeError(
            f"{owner}: unknown decoding option(s) {unknown}; the "
            f"constraints are {list(OPTIONS)}."
        )
    processors, normaliser, on = [], None, {}
    for kind in (LengthPenalty, *PROCESSORS):
        value = options.get(kind.option, kind.default)
        value = kind.check(value, max_length, vocabulary_size, owner)
        if value is None:
            continue
        on[kind.option] = list(value) if isinstance(value, tuple) else value
        part = kind.build(value, max_length, vocabulary_size)
        if kind is LengthPenalty:
            normaliser = part
        else:
            processors.append(part)
    return Constraints(processors, normaliser, on)


def split(options, max_length, vocabulary_size, owner):
    """`(check(constraint options), the other options)`: `generate`'s
    keyword options, the constraints' and the sampler's."""
    limits = {k: v for k, v in options.items() if k in OPTIONS}
    rest = {k: v for k, v in options.items() if k not in OPTIONS}
    return check(limits, max_length, vocabulary_size, owner), rest


def _row_column_pairs(columns, rows):
    """`(rows * n, 2)` int32 `(row, column)` indices of `columns`."""
    row_ids = ops.broadcast_to(
        ops.arange(rows, dtype="int32")[:, None], ops.shape(columns)
    )
    return ops.reshape(ops.stack([row_ids, columns], axis=-1), (-1, 2))


# `length ** length_penalty`, for every length up to `max_length`, stays
# within [1e-20, 1e20]: a score of magnitude 1e-18 to 1e18 stays a normal,
# finite float32 once divided by it, so the order of the scores is kept. A
# larger penalty turns scores into -0.0 or -inf (float32 has 1e-38 to 3e38),
# and the n-best order into noise: it is refused.
LOG_PENALTY_LIMIT = math.log(1e20)


def penalty_bound(max_length):
    """The largest `|length_penalty|` `check` takes for `max_length`:
    `ln(1e20) / ln(max_length)` (any penalty for `max_length=1`, whose
    lengths are all 1)."""
    if max_length <= 1:
        return math.inf
    return LOG_PENALTY_LIMIT / math.log(max_length)


def _check_length_penalty(value, owner, max_length):
    wrong_type = isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (numbers.Real, np.floating, np.integer)
    )
    if wrong_type or not math.isfinite(float(value)):
        error = ArgumentTypeError if wrong_type else ValueError
        raise error(
            f"{owner}: `length_penalty` must be a finite real number "
            "(0 ranks by summed log-probability, > 0 favours longer "
            "outputs, < 0 shorter ones); got "
            f"{value!r} ({type(value).__name__})."
        )
    bound = penalty_bound(max_length)
    if abs(float(value)) > bound:
        raise ValueError(
            f"{owner}: `length_penalty` must be in [-{bound:.4g}, "
            f"{bound:.4g}] for max_length={max_length} (so that "
            "`max_length ** |length_penalty|` <= 1e20 and the float32 "
            "normalised scores keep their order); got "
            f"{value!r} ({type(value).__name__})."
        )
    return float(value)


def _check_id_list(ids, name, owner, low, vocabulary_size):
    """A flat sequence of ids in `[low, vocabulary_size)` (or None: no
    id) as a tuple of ints, or a `ValueError` / `ArgumentTypeError` naming
    `name`."""
    if ids is None:
        return ()
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise ArgumentTypeError(
            f"{owner}: `{name}` must be a sequence of integer ids in "
            f"[{low}, {vocabulary_size}), or None; got {ids!r} "
            f"({type(ids).__name__})."
        )
    # Nested ids (`[[4, 5]]`, a 2-D array) are refused, not flattened:
    # they are not the flat list of ids `generate` documents.
    flat = not isinstance(ids, np.ndarray) or ids.ndim == 1
    items = list(ids) if flat else []
    flat = flat and not any(
        hasattr(i, "__iter__") and not isinstance(i, (str, bytes))
        for i in items
    )
    if not flat:
        raise ArgumentTypeError(
            f"{owner}: `{name}` must be a flat list of token ids "
            f"(integers in [{low}, {vocabulary_size})), or None; got "
            f"{ids!r} ({type(ids).__name__})."
        )
    return tuple(
        check_int(i, name, owner, low, vocabulary_size - 1, type_error=True)
        for i in items
    )
