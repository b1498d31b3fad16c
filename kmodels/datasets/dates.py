"""A parallel corpus that ships with the package: dates written many ways,
translated to ISO 8601.

`"The 3rd of March 2021"`, `"03/03/21"`, `"Wed, March 3, 2021"` and the other
styles below all translate to `"2021-03-03"`. The task needs attention (the
day, month and year sit at different places in each style) but no download,
and every label is checked against Python's `datetime` in the tests.

Tokenisation: with `TextProcessor(**DATE_TEXT)` every number, word, ordinal
suffix and separator is a token (`"3rd"` -> `3 rd`), so the target
`"2021-03-03"` becomes `[START] 2021 - 03 - 03 [END]` and each output token
copies or maps one source token.
"""

import datetime

import numpy as np

# Years a two-digit year can stand for: the POSIX `%y` pivot (69-99 -> 19xx,
# 00-68 -> 20xx), so `"03/03/21"` has one reading.
FIRST_DAY = datetime.date(1969, 1, 1)
LAST_DAY = datetime.date(2068, 12, 31)

# Separators that become tokens of their own ("2021.03.03" -> 2021 . 03 . 03).
DATE_PUNCTUATION = ".,/-"
# TextProcessor settings for this corpus.
DATE_TEXT = dict(
    punctuation=DATE_PUNCTUATION, keep_digits=True, split_digits=True
)

_MONTHS = (
    "January February March April May June July August September October "
    "November December"
).split()
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()


def _ordinal(day):
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th') }"


def _month(d):
    return _MONTHS[d.month - 1]


def _mon(d):
    return _MONTHS[d.month - 1][:3]


def _weekday(d):
    return _WEEKDAYS[d.weekday()]


# Each style is a function of the date; names are the public style ids.
STYLES = {
    "ordinal_of": lambda d: f"the {_ordinal(d.day)} of {_month(d)} {d.year}",
    "day_month": lambda d: f"{d.day} {_month(d)} {d.year}",
    "month_day": lambda d: f"{_month(d)} {d.day}, {d.year}",
    "month_ordinal": lambda d: f"{_month(d)} {_ordinal(d.day)}, {d.year}",
    "day_mon": lambda d: f"{d.day} {_mon(d)} {d.year}",
    "mon_day": lambda d: f"{_mon(d)} {d.day}, {d.year}",
    "weekday": lambda d: f"{_weekday(d)}, {_month(d)} {d.day}, {d.year}",
    "slash_dmy": lambda d: f"{d.day:02d}/{d.month:02d}/{d.year}",
    "slash_dmy_short": lambda d: (
        f"{d.day:02d}/{d.month:02d}/{d.year % 100:02d}"
    ),
    "dot_dmy": lambda d: f"{d.day}.{d.month}.{d.year}",
    "dot_ymd": lambda d: f"{d.year}.{d.month:02d}.{d.day:02d}",
    "iso": lambda d: d.isoformat(),
}


def _capitalize(text):
    return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))


_CASES = (str.lower, _capitalize, str.upper, lambda s: s)


def format_date(date, style):
    """`date` written in `style` (a key of `STYLES`), e.g. `"March 3, 2021"`.

    Raises:
        ValueError: an unknown style, or a date outside `FIRST_DAY ..
            LAST_DAY` (where two-digit years stop being unambiguous).
    """
    if style not in STYLES:
        raise ValueError(
            f"Unknown date style {style!r}; expected one of {list(STYLES)}."
        )
    if not FIRST_DAY <= date <= LAST_DAY:
        raise ValueError(
            f"Dates must lie in [{FIRST_DAY}, {LAST_DAY}] (two-digit years "
            f"are read with the POSIX pivot); got {date}."
        )
    return STYLES[style](date)


def date_pairs(n, seed=0, styles=None):
    """`n` random (source, target) pairs: a date in a random style and case,
    and its ISO form.

    Dates are uniform over `FIRST_DAY .. LAST_DAY` and styles uniform over
    `styles`; the case of the words is random (lower, Title, UPPER or as
    written), so the standardisation has work to do. The same `seed` gives the
    same pairs on every machine (NumPy's PCG64).

    Args:
        n: int, number of pairs.
        seed: int, the random seed.
        styles: optional sequence of keys of `STYLES` (all by default).

    Returns:
        `(sources, targets)`, two lists of `n` str, e.g.
        `(["MARCH 3, 2021", ...], ["2021-03-03", ...])`.

    Example:

    >>> sources, targets = date_pairs(2, seed=0)
    >>> len(sources), targets[0][4], targets[0][7]
    (2, '-', '-')
    """
    styles = list(STYLES) if styles is None else list(styles)
    for style in styles:
        if style not in STYLES:
            raise ValueError(
                f"Unknown date style {style!r}; expected one of {list(STYLES)}."
            )
    rng = np.random.default_rng(seed)
    span = (LAST_DAY - FIRST_DAY).days + 1
    offsets = rng.integers(0, span, size=n)
    style_ids = rng.integers(0, len(styles), size=n)
    case_ids = rng.integers(0, len(_CASES), size=n)
    sources, targets = [], []
    for offset, s, c in zip(offsets, style_ids, case_ids):
        date = FIRST_DAY + datetime.timedelta(days=int(offset))
        sources.append(_CASES[c](format_date(date, styles[s])))
        targets.append(date.isoformat())
    return sources, targets


def date_split(n_train, n_test, seed=0, styles=None):
    """Training and held-out pairs; no held-out source occurs in training.

    Returns:
        `((train_sources, train_targets), (test_sources, test_targets))`.
    """
    train = date_pairs(n_train, seed=seed, styles=styles)
    seen = set(train[0])
    test_sources, test_targets = [], []
    draw = 0
    while len(test_sources) < n_test:
        draw += 1
        more = date_pairs(2 * n_test, seed=(seed, draw), styles=styles)
        for source, target in zip(*more):
            if source not in seen and len(test_sources) < n_test:
                seen.add(source)
                test_sources.append(source)
                test_targets.append(target)
    return train, (test_sources, test_targets)
