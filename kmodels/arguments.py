"""Validation of constructor arguments, with the same message everywhere.

Keras layers cast their size arguments with `int()`, so `units=2.5` becomes 2
and `units="8"` becomes 8 without a word, and a zero size fails later with a
message about Keras' own argument names (`output_dim`, `input_dim`). kmodels
checks its arguments at construction and names them as the user wrote them:

>>> from kmodels.arguments import check_int
>>> check_int(8, "units", "Encoder")
8
>>> check_int(2.5, "units", "Encoder")
Traceback (most recent call last):
...
ValueError: Encoder: `units` must be an integer >= 1; got 2.5 (float).

The checks of a call's arguments (`Translator.generate`, `translate`) pass
`type_error=True`: an argument of the wrong type then raises an
`ArgumentTypeError`, a `TypeError` that is also a `ValueError` (so code
written against the constructor checks still catches it).
"""

import math
import numbers

import numpy as np


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a `TypeError`, and a `ValueError` as
    every other refusal of this module's checks."""


def _refuse(message, wrong_type, type_error):
    if wrong_type and type_error:
        raise ArgumentTypeError(message)
    raise ValueError(message)


def _describe(value):
    return f"{value!r} ({type(value).__name__})"


def check_int(value, name, owner, minimum=1, maximum=None, *, type_error=False):
    """Returns `value` as a Python int, or raises a `ValueError`.

    Python and NumPy integers are accepted; bools, floats (even `8.0`),
    strings and everything else are refused, as are values outside
    `[minimum, maximum]` (either bound may be `None`).

    Args:
        value: the argument as passed.
        name: the argument's name, e.g. `"units"`.
        owner: who takes it, e.g. `"Encoder"`.
        minimum: smallest allowed value, or `None`.
        maximum: largest allowed value, or `None`.
        type_error: raise an `ArgumentTypeError` (a `TypeError` and a
            `ValueError`) for a value that is not an integer.
    """
    wrong_type = isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (numbers.Integral, np.integer)
    )
    if wrong_type:
        ok = False
    else:
        value = int(value)
        ok = (minimum is None or value >= minimum) and (
            maximum is None or value <= maximum
        )
    if not ok:
        _refuse(
            f"{owner}: `{name}` must be an integer{_bounds(minimum, maximum)}"
            f"; got {_describe(value)}.",
            wrong_type,
            type_error,
        )
    return value


def check_optional_int(
    value, name, owner, minimum=1, maximum=None, *, type_error=False
):
    """`None`, or `check_int(value, ...)`."""
    if value is None:
        return None
    return check_int(
        value, name, owner, minimum, maximum, type_error=type_error
    )


def check_float(
    value,
    name,
    owner,
    minimum=None,
    maximum=None,
    exclusive_minimum=False,
    *,
    type_error=False,
):
    """Returns `value` as a finite Python float, or raises a `ValueError`.

    Python and NumPy real numbers are accepted; bools, strings, NaN and
    infinities are refused, as are values below `minimum` (or equal to it
    when `exclusive_minimum`) or above `maximum`. With `type_error`, a value
    that is not a real number raises an `ArgumentTypeError`.
    """
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(
        value, (numbers.Real, np.floating, np.integer)
    )
    wrong_type = not ok
    if ok:
        number = float(value)
        ok = math.isfinite(number)
        if ok and minimum is not None:
            ok = number > minimum if exclusive_minimum else number >= minimum
        if ok and maximum is not None:
            ok = number <= maximum
    if not ok:
        low = ""
        if minimum is not None:
            low = f" {'>' if exclusive_minimum else '>='} {minimum}"
        high = "" if maximum is None else f" and <= {maximum}"
        if low and high:
            text = f"{low}{high}"
        else:
            text = f"{low}{high.replace(' and', '')}"
        _refuse(
            f"{owner}: `{name}` must be a finite number{text}; got "
            f"{_describe(value)}.",
            wrong_type,
            type_error,
        )
    return number


def check_bool(value, name, owner, *, type_error=False):
    """Returns `value` as a Python bool; only `True`/`False` (and NumPy
    bools) are accepted: `"False"` or `0` would silently mean the opposite
    or something else."""
    if not isinstance(value, (bool, np.bool_)):
        _refuse(
            f"{owner}: `{name}` must be True or False; got {_describe(value)}.",
            True,
            type_error,
        )
    return bool(value)


def check_str(value, name, owner):
    """Returns `value` when it is a `str`, else raises an
    `ArgumentTypeError` (a `TypeError` and a `ValueError`)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{owner}: `{name}` must be a str; got {_describe(value)}."
        )
    return value


def check_choice(value, name, owner, choices):
    """Returns `value` when it is one of `choices`, else raises."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"{owner}: `{name}` must be one of {tuple(choices)}; got "
            f"{_describe(value)}."
        )
    return value


def check_rate(value, name, owner):
    """Returns a dropout-like rate as a Python float in `[0, 1)`, or raises.

    A rate of 1 drops everything (Keras then scales by `1 / 0`), so it is
    refused like a negative, non-finite or non-numeric value.
    """
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(
        value, (numbers.Real, np.floating, np.integer)
    )
    if ok:
        number = float(value)
        ok = 0.0 <= number < 1.0
    if not ok:
        raise ValueError(
            f"{owner}: `{name}` must be a number in [0, 1); got "
            f"{_describe(value)}."
        )
    return number


def _bounds(minimum, maximum):
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def check_texts(texts, who):
    """Returns `(list_of_str, was_scalar)`; bytes are decoded as UTF-8."""
    scalar = isinstance(texts, (str, bytes))
    if scalar:
        texts = [texts]
    elif isinstance(texts, np.ndarray):
        texts = texts.reshape(-1).tolist()
    else:
        try:
            texts = list(texts)
        except TypeError:
            raise ValueError(
                f"{who} expects a string or a sequence of strings; got "
                f"{type(texts).__name__}."
            ) from None
    out = []
    for i, text in enumerate(texts):
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise ValueError(
                f"{who} expects strings; item {i} is "
                f"{type(text).__name__} ({text!r})."
            )
        out.append(text)
    return out, scalar
