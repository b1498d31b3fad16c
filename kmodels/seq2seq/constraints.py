"""Decoding constraints of `Translator.generate`: length penalty, minimum
length, no repeated n-grams and banned ids.

`check` validates the four arguments, the same way on every backend and
before anything runs, and returns a `Constraints`. Its `mask` removes, in
`keras.ops` inside the generation loop, the candidates a hypothesis may not
take next; `normalise` divides finished scores by `length **
length_penalty` (HF `generate`'s and fairseq's definition).

Constraints only remove candidates: a sequence's score stays the sum of
the model's own log-probabilities (`log_softmax` over every id but the
padding id), with no renormalisation over the allowed ids. A hypothesis
with no allowed id left (every id banned or repeating an n-gram) cannot go
on: it stops, writing padding, and scores `-inf`.
"""

import copy
import math
import numbers

import numpy as np
from keras import ops

from kmodels.arguments import ArgumentTypeError
from kmodels.arguments import check_int

NEG_INF = float("-inf")


class Constraints:
    """Checked decoding constraints (see `check`).

    Attributes:
        length_penalty: float; finished scores are divided by
            `length ** length_penalty`.
        min_length: int >= 0; the end id is refused while fewer than
            `min_length - 1` ids have been generated.
        no_repeat_ngram_size: int >= 0; 0 disables it.
        banned_ids: sorted tuple of ints, never generated.
        active: bool, any constraint is set (the defaults give the
            unconstrained loop, exactly).
        key: hashable, what the compiled loop's structure depends on:
            whether constraints are on, and the n-gram size. The banned
            ids, the minimum length and the penalty are `values`, inputs
            of the loop, so that changing them does not retrace (with
            `active`, a loop applies all three; their neutral values, no
            banned id, 0 and 0, change nothing).
        values: `(banned, min_length, length_penalty)`: a bool
            `(vocabulary_size,)` NumPy mask, int32 and float32 scalars;
            `mask` and `normalise` read them (`with_values` swaps in the
            compiled loop's tensors).
    """

    def __init__(
        self,
        length_penalty=0.0,
        min_length=0,
        no_repeat_ngram_size=0,
        banned_ids=(),
        vocabulary_size=1,
    ):
        self.length_penalty = float(length_penalty)
        self.min_length = int(min_length)
        self.no_repeat_ngram_size = int(no_repeat_ngram_size)
        self.banned_ids = tuple(sorted(set(int(i) for i in banned_ids)))
        self.active = bool(
            self.length_penalty != 0.0
            or self.min_length > 1
            or self.no_repeat_ngram_size
            or self.banned_ids
        )
        self.key = (self.active, self.no_repeat_ngram_size)
        banned = np.zeros(vocabulary_size, bool)
        banned[list(self.banned_ids)] = True
        self.values = (
            banned,
            np.int32(self.min_length),
            np.float32(self.length_penalty),
        )

    def with_values(self, values):
        """A copy reading `values` (`(banned, min_length, length_penalty)`,
        e.g. a compiled loop's input tensors) instead of its own."""
        bound = copy.copy(self)
        bound.values = tuple(values)
        return bound

    def mask(self, logits, generated, count, end_id):
        """`logits` with `-inf` at the ids a hypothesis may not take next.

        Traceable (`keras.ops`); on torch it takes torch tensors.

        Args:
            logits: float32 `(rows, vocabulary)`.
            generated: int `(rows, length)`, the ids generated so far at
                positions `< count` (later positions are ignored).
            count: int scalar (tensor or Python int), how many ids each
                row has generated.
            end_id: int.

        Returns:
            float32 `(rows, vocabulary)`.
        """
        if not self.active:
            return logits
        banned, min_length, _ = self.values
        vocabulary = logits.shape[-1]
        ids = ops.arange(vocabulary, dtype="int32")
        # The end id would be the (count + 1)-th generated id.
        short = ops.logical_and(ids == end_id, count + 1 < min_length)
        refused = ops.logical_or(ops.convert_to_tensor(banned), short)[None]
        if self.no_repeat_ngram_size:
            repeats = repeated_ngram_ids(
                generated, count, self.no_repeat_ngram_size, vocabulary
            )
            if repeats is not None:
                refused = ops.logical_or(refused, repeats)
        return ops.where(refused, NEG_INF, logits)

    def refuse(self, logits, generated, count, end_id):
        """`mask` for `logits` whose padding id (column 0) is `-inf`
        already, in fewer passes over them: the banned ids and the end id
        in one select, and the ids that would repeat an n-gram written as
        `-inf` with one scatter (those of the windows that do not match
        go to column 0, which stays `-inf`). Traceable (`keras.ops`).

        Example:

        >>> import numpy as np
        >>> limits = Constraints(banned_ids=(4,), vocabulary_size=6)
        >>> logits = np.array([[-np.inf, 1, 2, 3, 4, 5]], "float32")
        >>> np.asarray(limits.refuse(logits, np.zeros((1, 2), "int32"), 0, 5))
        array([[-inf,   1.,   2.,   3., -inf,   5.]], dtype=float32)
        """
        if not self.active:
            return logits
        banned, min_length, _ = self.values
        ids = ops.arange(logits.shape[-1], dtype="int32")
        short = ops.logical_and(ids == end_id, count + 1 < min_length)
        refused = ops.logical_or(ops.convert_to_tensor(banned), short)
        logits = ops.where(refused[None], NEG_INF, logits)
        if not self.no_repeat_ngram_size:
            return logits
        found = _repeated_ngrams(generated, count, self.no_repeat_ngram_size)
        if found is None:
            return logits
        match, following = found
        columns = ops.where(match, following, 0)
        indices = _row_column_pairs(columns, ops.shape(logits)[0])
        return ops.scatter_update(
            logits,
            indices,
            ops.full((ops.shape(indices)[0],), NEG_INF, logits.dtype),
        )

    def normalise(self, scores, ids, max_length):
        """`scores / length ** length_penalty`, where `length` counts the
        generated ids with the end id, or is `max_length` for a sequence
        cut there. `ids` as `generate` returns them (the end id and what
        follows written as 0): `length = min(nonzero + 1, max_length)`."""
        if not self.active:
            return scores
        penalty = ops.cast(self.values[2], "float32")
        real = ops.sum(ops.cast(ids != 0, "float32"), axis=-1)
        length = ops.minimum(real + 1.0, float(max_length))
        return scores / ops.power(length, penalty)


def repeated_ngram_ids(generated, count, size, vocabulary):
    """Bool `(rows, vocabulary)`: the ids that would complete, as the
    `count`-th generated id, an n-gram of `size` ids that the row has
    generated already (None when `generated` is too short for any).

    An n-gram starting at position `j` repeats when its first `size - 1`
    ids equal the row's last `size - 1` ones and it ended before them
    (`j + size - 1 < count`); its last id is then refused.
    """
    found = _repeated_ngrams(generated, count, size)
    if found is None:
        return None
    match, following = found
    rows = ops.shape(following)[0]
    # The following ids of the matching windows are scattered into the row
    # (the others into an extra column, dropped): O(rows * windows), where
    # comparing every window with every id is O(rows * windows * vocabulary)
    # (2.2x the plain beam search's time at vocabulary 5,000).
    columns = ops.where(match, following, vocabulary)
    indices = _row_column_pairs(columns, rows)
    hits = ops.scatter_update(
        ops.zeros((rows, vocabulary + 1), "float32"),
        indices,
        ops.ones((ops.shape(indices)[0],), "float32"),
    )
    return hits[:, :vocabulary] > 0


def _repeated_ngrams(generated, count, size):
    """`(match, following)`, bool and int32 `(rows, windows)`: which
    n-grams of `size` ids of each row repeat if its next id is their
    following id (see `repeated_ngram_ids`); None when `generated` is too
    short for any."""
    length = generated.shape[1]
    windows = length - size + 1
    if windows <= 0:
        return None
    generated = ops.cast(generated, "int32")
    rows = ops.shape(generated)[0]
    match = ops.ones((rows, windows), dtype="bool")
    for k in range(size - 1):
        at = ops.clip(count - size + 1 + k, 0, length - 1)
        last = ops.take(generated, ops.reshape(at, (1,)), axis=1)
        match = ops.logical_and(match, generated[:, k : k + windows] == last)
    started = ops.arange(windows, dtype="int32")
    match = ops.logical_and(match, (started <= count - size)[None])
    return match, generated[:, size - 1 : size - 1 + windows]


def _row_column_pairs(columns, rows):
    """`(rows * windows, 2)` int32 `(row, column)` indices of `columns`."""
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


def _check_banned_ids(banned_ids, vocabulary_size, owner):
    if banned_ids is None:
        return ()
    if isinstance(banned_ids, (str, bytes)) or not hasattr(
        banned_ids, "__iter__"
    ):
        raise ArgumentTypeError(
            f"{owner}: `banned_ids` must be a sequence of integer ids in "
            f"[0, {vocabulary_size}), or None; got {banned_ids!r} "
            f"({type(banned_ids).__name__})."
        )
    # Nested ids (`[[4, 5]]`, a 2-D array) are refused, not flattened:
    # they are not the flat list of ids `generate` documents.
    flat = not isinstance(banned_ids, np.ndarray) or banned_ids.ndim == 1
    ids = list(banned_ids) if flat else []
    flat = flat and not any(
        hasattr(i, "__iter__") and not isinstance(i, (str, bytes)) for i in ids
    )
    if not flat:
        raise ArgumentTypeError(
            f"{owner}: `banned_ids` must be a flat list of token ids "
            f"(integers in [0, {vocabulary_size})), or None; got "
            f"{banned_ids!r} ({type(banned_ids).__name__})."
        )
    checked = []
    for i in ids:
        checked.append(
            check_int(
                i,
                "banned_ids",
                owner,
                0,
                vocabulary_size - 1,
                type_error=True,
            )
        )
    left = set(range(1, vocabulary_size)) - set(checked)
    if not left:
        raise ValueError(
            f"{owner}: `banned_ids` bans every id the model can generate "
            f"(1 to {vocabulary_size - 1}; the padding id 0 is never "
            f"generated); got {sorted(set(checked))}."
        )
    return tuple(checked)


def check(
    length_penalty,
    min_length,
    no_repeat_ngram_size,
    banned_ids,
    max_length,
    vocabulary_size,
    owner,
):
    """Checks `generate`'s constraint arguments and returns `Constraints`.

    Raises a `ValueError` naming the argument, what was expected and what
    arrived (an `ArgumentTypeError`, also a `TypeError`, for a wrong
    type): a non-finite `length_penalty`, or one with `max_length **
    |length_penalty| > 1e20` (see `penalty_bound`: float32 would turn the
    normalised scores into -0.0 or -inf), a negative `min_length` or
    `no_repeat_ngram_size`, `min_length > max_length`, banned ids out of
    `[0, vocabulary_size)` or covering every id but the padding id, or
    `banned_ids` that is not a flat sequence of ids (`[[4, 5]]`).
    """
    length_penalty = _check_length_penalty(length_penalty, owner, max_length)
    min_length = check_int(min_length, "min_length", owner, 0, type_error=True)
    if min_length > max_length:
        raise ValueError(
            f"{owner}: `min_length` must be <= max_length ({max_length}): "
            f"no output could be that long; got {min_length}."
        )
    no_repeat_ngram_size = check_int(
        no_repeat_ngram_size, "no_repeat_ngram_size", owner, 0, type_error=True
    )
    banned_ids = _check_banned_ids(banned_ids, vocabulary_size, owner)
    return Constraints(
        length_penalty,
        min_length,
        no_repeat_ngram_size,
        banned_ids,
        vocabulary_size,
    )
