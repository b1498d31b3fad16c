"""English user-interface strings with their human translations, read from
the gettext catalogues (`.po` files) that ship in Django's wheel.

Django's core and its `contrib` applications carry about 900 English
strings ("Enter a valid email address.", "Delete selected
%(verbose_name_plural)s") translated into dozens of languages by its
translators, under Django's BSD licence. They are what a translator of
user interfaces meets: short, with placeholders (`%(name)s`, `%s`, `{0}`),
markup, capitals and accents. kmodels ships none of it:

```
pip install "django==5.2.*"
```

```python
from kmodels.datasets import ui_strings

train, test = ui_strings.load_data("es")   # [(english, spanish), ...]
train[0]            # ('"%(value)s" is not a valid UUID.', ...)
```
"""

import ast
import pathlib
import zlib

from kmodels.datasets.packaged import check_test_fraction
from kmodels.datasets.packaged import package_file

INSTALL = 'pip install "django==5.2.*"'


def catalogues(language="es"):
    """The `django.po` catalogues of `language`, Django's core one first,
    then those of its `contrib` applications in alphabetical order.

    Args:
        language: a Django locale name, e.g. `"es"`, `"fr"`, `"pt_BR"`.

    Raises:
        ModuleNotFoundError: Django is not installed (the message gives the
            command above).
        ValueError: Django has no catalogue for `language`.
    """
    if not isinstance(language, str) or not language:
        raise ValueError(
            f"`language` must be a Django locale name such as 'es'; "
            f"received language={language!r}"
        )
    locale = package_file(
        "django", "conf/locale", INSTALL, "Django's UI strings"
    )
    core = locale / language / "LC_MESSAGES" / "django.po"
    if not core.exists():
        known = sorted(p.name for p in locale.iterdir() if p.is_dir())
        raise ValueError(
            f"Django has no catalogue for language={language!r}; it has "
            f"{len(known)}: {', '.join(known)}"
        )
    contrib = locale.parent.parent / "contrib"
    return [core] + sorted(
        contrib.glob(f"*/locale/{language}/LC_MESSAGES/django.po")
    )


def _unquote(line):
    # A PO string is a C-style quoted literal; Python reads the same escapes.
    return ast.literal_eval(line)


def read_po(path):
    """The translated entries of one gettext `.po` file.

    Left out, as gettext's `msgfmt` leaves them out of the compiled `.mo`
    file: the header (empty `msgid`), entries marked `fuzzy`, obsolete ones
    (`#~`) and those without a translation. A plural entry gives its
    singular form and first translation (`msgstr[0]`).

    Args:
        path: the `.po` file (UTF-8).

    Returns:
        A list of `(context, english, translation)` in file order;
        `context` is the entry's `msgctxt`, or `None`.
    """
    entries = []
    entry, field, fuzzy = {}, None, False

    def finish():
        nonlocal entry, field, fuzzy
        source = entry.get("msgid", "")
        target = entry.get("msgstr", entry.get("msgstr[0]", ""))
        if source and target and not fuzzy:
            entries.append((entry.get("msgctxt"), source, target))
        entry, field, fuzzy = {}, None, False

    def translated():
        return any(key.startswith("msgstr") for key in entry)

    for raw in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#~"):
            continue
        if not line:
            finish()
        elif line.startswith("#"):
            # Comments open the next entry: they come before its msgid.
            if translated():
                finish()
            if line.startswith("#,"):
                flags = {flag.strip() for flag in line[2:].split(",")}
                fuzzy = fuzzy or "fuzzy" in flags
        elif line.startswith('"'):
            entry[field] += _unquote(line)
        else:
            keyword, _, value = line.partition(" ")
            if keyword in ("msgctxt", "msgid") and translated():
                finish()
            field = keyword
            entry[field] = _unquote(value)
    finish()
    return entries


def load_pairs(language="es"):
    """The distinct English strings of Django's catalogues with their
    translation into `language`.

    A string that several catalogues or contexts translate (`"May"` as a
    month and as its abbreviation) keeps its first translation, in the
    order of `catalogues(language)`.

    Args:
        language: a Django locale name, e.g. `"es"`.

    Returns:
        A list of `(english, translation)` pairs, sorted by the English
        string.
    """
    pairs = {}
    for path in catalogues(language):
        for _, source, target in read_po(path):
            pairs.setdefault(source, target)
    return sorted(pairs.items())


def is_test(source, test_fraction):
    """Whether `source` falls in the test split: a hash of the English
    string (CRC-32), so a string stays on its side when catalogues gain or
    lose other strings."""
    return zlib.crc32(source.encode("utf-8")) % 10_000 < test_fraction * 10_000


def load_data(language="es", test_fraction=0.2):
    """`load_pairs(language)`, split into train and test by a hash of the
    English string (`is_test`).

    Args:
        language: a Django locale name, e.g. `"es"`.
        test_fraction: a float in (0, 1): the expected share of test pairs.

    Returns:
        `(train, test)`: two lists of `(english, translation)` pairs, each
        sorted by the English string.
    """
    check_test_fraction(test_fraction)
    pairs = load_pairs(language)
    test = [pair for pair in pairs if is_test(pair[0], test_fraction)]
    train = [pair for pair in pairs if not is_test(pair[0], test_fraction)]
    return train, test
