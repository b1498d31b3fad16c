"""The date corpus, checked against Python's datetime as the oracle."""

import calendar
import datetime
import re

import numpy as np
import pytest

from kmodels.datasets.dates import DATE_PUNCTUATION
from kmodels.datasets.dates import DATE_TEXT
from kmodels.datasets.dates import STYLES
from kmodels.datasets.dates import date_pairs
from kmodels.datasets.dates import date_split
from kmodels.datasets.dates import format_date
from kmodels.seq2seq.text_processor import TextProcessor

pytestmark = pytest.mark.backend_independent(
    reason="the date data set is generated in Python and NumPy"
)

# strptime patterns written from the style descriptions (C locale; %d and
# %m accept one or two digits, %y uses the POSIX pivot 69 -> 1969).
PATTERNS = [
    "the %d of %B %Y",
    "%d %B %Y",
    "%B %d, %Y",
    "%d %b %Y",
    "%b %d, %Y",
    "%A, %B %d, %Y",
    "%d/%m/%Y",
    "%d/%m/%y",
    "%d.%m.%Y",
    "%Y.%m.%d",
    "%Y-%m-%d",
]


def _parse(source):
    """Every date strptime reads from `source` (ordinal suffixes removed)."""
    text = re.sub(r"\b(\d+)(st|nd|rd|th)\b", r"\1", source.lower())
    dates = set()
    for pattern in PATTERNS:
        try:
            dates.add(datetime.datetime.strptime(text, pattern).date())
        except ValueError:
            pass
    return dates


def _check(source, target):
    dates = _parse(source)
    assert len(dates) == 1, (source, dates)
    (date,) = dates
    assert target == date.isoformat(), (source, target)
    # strptime ignores a wrong weekday name: check it separately.
    weekday = source.split(",")[0].lower()
    if weekday in [d.lower() for d in calendar.day_name]:
        assert weekday == calendar.day_name[date.weekday()].lower()


def test_labels_match_datetime():
    sources, targets = date_pairs(600, seed=7)
    for source, target in zip(sources, targets):
        _check(source, target)


def test_each_style_on_edge_dates():
    # First and last day of the range, a leap day, two-digit days/months,
    # and the ordinals that take "th" despite ending in 1-3.
    edges = ["1969-01-01", "2068-12-31", "2000-02-29", "1999-11-11"]
    edges += ["2012-12-12", "2023-10-13", "2031-05-21"]
    for style in STYLES:
        for iso in edges:
            date = datetime.date.fromisoformat(iso)
            _check(format_date(date, style), iso)


def test_styles_written_as_documented():
    date = datetime.date(2021, 3, 3)
    got = {style: format_date(date, style) for style in STYLES}
    assert got == {
        "ordinal_of": "the 3rd of March 2021",
        "day_month": "3 March 2021",
        "month_day": "March 3, 2021",
        "month_ordinal": "March 3rd, 2021",
        "day_mon": "3 Mar 2021",
        "mon_day": "Mar 3, 2021",
        "weekday": "Wednesday, March 3, 2021",
        "slash_dmy": "03/03/2021",
        "slash_dmy_short": "03/03/21",
        "dot_dmy": "3.3.2021",
        "dot_ymd": "2021.03.03",
        "iso": "2021-03-03",
    }


def test_same_seed_same_corpus_other_seed_other_corpus():
    a = date_pairs(50, seed=3)
    assert a == date_pairs(50, seed=3)
    assert a != date_pairs(50, seed=4)
    sources, targets = a
    assert len(sources) == len(targets) == 50
    assert all(isinstance(s, str) for s in sources + targets)


def test_styles_and_cases_are_all_drawn():
    sources, _ = date_pairs(600, seed=0)
    styles = set(STYLES)
    seen = set()
    for source in sources:
        # Which style wrote it: the one whose output equals it, ignoring case.
        (date,) = _parse(source)
        for style in styles:
            if format_date(date, style).lower() == source.lower():
                seen.add(style)
    assert seen == styles
    assert any(s.isupper() for s in sources)
    assert any(s[:1].isupper() and not s.isupper() for s in sources)


def test_split_held_out_sources_are_unseen():
    (train_src, train_tgt), (test_src, test_tgt) = date_split(300, 100, seed=1)
    assert len(train_src) == 300 and len(test_src) == len(test_tgt) == 100
    assert not set(test_src) & set(train_src)
    assert len(set(test_src)) == 100
    for source, target in zip(test_src, test_tgt):
        _check(source, target)


def test_bad_style_and_range_raise():
    with pytest.raises(ValueError, match="Unknown date style 'roman'"):
        date_pairs(3, styles=["iso", "roman"])
    with pytest.raises(
        ValueError,
        match=r"\[1969-01-01, 2068-12-31\] \(two-digit.*got 1968-12-31",
    ):
        format_date(datetime.date(1968, 12, 31), "iso")


def test_targets_tokenize_to_five_tokens():
    # The task is learnable token by token: the ISO target splits into
    # year, "-", month, "-", day.
    p = TextProcessor(max_length=7, **DATE_TEXT)
    sources, targets = date_pairs(200, seed=5)
    p.adapt(targets)
    ids = p(targets)
    assert ids.shape == (200, 7)
    assert np.all(ids[:, 0] == p.start_id) and np.all(ids[:, 6] == p.end_id)
    assert p.decode(ids, separator="") == targets
    assert p.tokens(ids[:1]).tolist() == [
        ["[START]", *targets[0].replace("-", " - ").split(), "[END]"]
    ]
    # Sources: every number, ordinal suffix, word and separator is a token,
    # and the longest style fits the demo's 8 tokens.
    q = TextProcessor(max_length=8, **DATE_TEXT)
    assert q.standardize("The 3rd of MARCH, 2021") == (
        "[START] the 3 rd of march , 2021 [END]"
    )
    assert q.standardize("03/03/21") == "[START] 03 / 03 / 21 [END]"
    lengths = [len(q.standardize(s).split()) for s in sources]
    assert max(lengths) == 8
    assert DATE_TEXT == {
        "punctuation": DATE_PUNCTUATION,
        "keep_digits": True,
        "split_digits": True,
    }
