"""`TextProcessor(standardize="unicode")`: tokens for real text.

The tutorial's standardisation lower-cases, strips accents and deletes
every character outside `[a-z.?!,¿]`; user-interface strings lose their
capitals, accents, placeholders and markup. These rules keep them:

1. The text is put in Unicode NFC (composed accents: `"e\\u0301"` and
   `"é"` give the same token).
2. Placeholders and markup are protected: each match of the processor's
   patterns is one token, never split. By default printf conversions
   (`%(name)s`, `%s`, `%d`, `%.2f`, `%%`), brace fields (`{name}`, `{0}`,
   `{}`), HTML tags (`<b>`, `</a>`, `<a href="...">`) and HTML entities
   (`&amp;`, `&#39;`).
3. Outside them, a word is a run of letters, marks and digits (with inner
   apostrophes: `don't`, `l'homme`); every other character that is not
   whitespace (punctuation, symbols) is a token of its own.
4. Spacing is kept exactly, with two tokens: by default tokens are
   separated by one space, except none before `. , ; : ! ? ) ] } » …` and
   none after `( [ { ¿ ¡ «`; `[JOIN]` marks two tokens written together
   where the rule puts a space, `[SPACE]` a space where it puts none.
   `detokenize` applies the same rule, so it gives back the NFC text with
   each run of whitespace written as one space, ends stripped.

```python
from kmodels.seq2seq.unicode_text import detokenize, tokens, placeholder_pattern

protect = placeholder_pattern(None)
tokens('Añadir "%(name)s"', protect)
# ['Añadir', '"', '[JOIN]', '%(name)s', '[JOIN]', '"']
detokenize(['Añadir', '"', '[JOIN]', '%(name)s', '[JOIN]', '"'])
# 'Añadir "%(name)s"'
```
"""

import re
import unicodedata

JOIN = "[JOIN]"
SPACE = "[SPACE]"
MARKERS = (JOIN, SPACE)
# The slots of masked placeholders (`tokens(..., mask=True)`): a text's
# first 8 distinct placeholders; further ones stay whole.
SLOTS = tuple(f"[PH{k}]" for k in range(1, 9))
# The default protected patterns: printf conversions, brace fields, HTML
# tags and entities.
PLACEHOLDERS = (
    r"%(?:\([^()\s]+\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[diouxXeEfFgGcrsa%]",
    r"\{[^{}\s]*\}",
    r"</?[A-Za-z][^<>]*>",
    r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);",
)
# Letters and digits (not "_"), with inner apostrophes.
_LETTERS = r"[^\W_]+(?:['\u2019][^\W_]+)*"
NO_SPACE_BEFORE = frozenset(".,;:!?)]}»…")
NO_SPACE_AFTER = frozenset("([{¿¡«")


def checked_settings(standardize, placeholders, owner, **tutorial_only):
    """`(placeholders, scanner)` of a `TextProcessor`'s settings: the
    protected patterns and `placeholder_pattern`'s scanner for
    `standardize="unicode"`, `(None, None)` for the tutorial's rules.
    `tutorial_only` maps the arguments that `"unicode"` cannot honour to
    `(value, the only value it takes)`."""
    if standardize != "unicode":
        if placeholders is not None:
            raise ValueError(
                f"{owner}: `placeholders` are protected by "
                "standardize='unicode' only (the tutorial's rules drop "
                f"their characters); got placeholders={placeholders!r} "
                "with standardize='tutorial'."
            )
        return None, None
    for name, (value, default) in tutorial_only.items():
        if value != default:
            raise ValueError(
                f"{owner}: standardize='unicode' keeps every character and "
                f"takes words only, with {name}={default!r}; got "
                f"{name}={value!r}."
            )
    if placeholders is not None and (
        isinstance(placeholders, (str, bytes))
        or not isinstance(placeholders, (list, tuple))
    ):
        raise ValueError(
            f"{owner}: `placeholders` must be a list of regular expressions "
            f"(str) or None; got {type(placeholders).__name__} "
            f"({placeholders!r})."
        )
    placeholders = list(PLACEHOLDERS if placeholders is None else placeholders)
    return placeholders, placeholder_pattern(placeholders)


def placeholder_pattern(placeholders):
    """The scanner of `tokens` for a list of protected regular
    expressions (`None`: `PLACEHOLDERS`; `()`: none), or raises a
    `ValueError` naming the pattern that does not compile."""
    patterns = PLACEHOLDERS if placeholders is None else placeholders
    for pattern in patterns:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as error:
            raise ValueError(
                "TextProcessor: each of `placeholders` must be a regular "
                f"expression (a str); got {pattern!r}, which does not "
                f"compile ({error})."
            ) from None
    # Placeholders first (the longest protected match at a position wins
    # over a word), then words, whitespace, any other character.
    protected = "|".join(f"(?:{p})" for p in patterns)
    alternatives = [f"(?P<protected>{protected})"] if patterns else []
    alternatives += [
        f"(?P<word>{_LETTERS})",
        r"(?P<space>\s+)",
        r"(?P<other>.)",
    ]
    return re.compile("|".join(alternatives), re.DOTALL)


def default_space(previous, token):
    """Whether the default rule writes a space between two tokens."""
    return not (token in NO_SPACE_BEFORE or previous in NO_SPACE_AFTER)


def tokens(text, scanner, mask=False, known=None):
    """The tokens of `text` (a str): NFC, protected matches whole, words,
    single other characters, and `[JOIN]` / `[SPACE]` where the text's
    spacing differs from the default rule.

    `mask=True` writes each protected match as a slot, `[PH1]` for the
    first distinct one and so on (`SLOTS`), and returns `(tokens, the
    distinct matches in order of appearance)`. `known` (a list of str,
    e.g. the source's matches when this is its translation) numbers the
    slots instead: a match that is its k-th element is `[PHk]`, a match
    absent from it stays whole."""
    text = unicodedata.normalize("NFC", text)
    out, found, previous, spaced = [], [], None, False
    order = found if known is None else list(known)
    for match in scanner.finditer(text):
        if match.lastgroup == "space":
            spaced = True
            continue
        token = match.group()
        if mask and match.lastgroup == "protected":
            if token not in found:
                found.append(token)
            k = order.index(token) if token in order else len(SLOTS)
            token = SLOTS[k] if k < len(SLOTS) else token
        if previous is not None:
            default = default_space(previous, token)
            if spaced and not default:
                out.append(SPACE)
            elif not spaced and default:
                out.append(JOIN)
        out.append(token)
        previous, spaced = token, False
    return (out, found) if mask else out


def detokenize(words, placeholders=None):
    """The text of `tokens`' output (or a model's): the default spacing
    rule, with `[JOIN]` and `[SPACE]` overriding it for the next pair; a
    marker with no token before or after it is dropped. `placeholders`:
    the strings of the slots (`[PHk]` is its k-th element; a slot past
    its end stays as it is)."""
    slots = dict(zip(SLOTS, placeholders or ()))
    text, previous, force = "", None, None
    for word in words:
        if word in MARKERS:
            force = word == SPACE
            continue
        if previous is not None:
            space = default_space(previous, word) if force is None else force
            text += " " if space else ""
        text += slots.get(word, word)
        previous, force = word, None
    return text


def check_lists(placeholders, rows, who):
    """`placeholders` (one list of str per text or row), or raises a
    `ValueError` naming what arrived."""
    if placeholders is None:
        return None
    ok = not isinstance(placeholders, (str, bytes)) and all(
        isinstance(p, (list, tuple)) and all(isinstance(x, str) for x in p)
        for p in placeholders
    )
    if not ok or len(placeholders) != rows:
        raise ValueError(
            f"{who}: `placeholders` holds one list of str per text (as "
            f"`placeholders_in` returns them), {rows} here; got "
            f"{placeholders!r}."
        )
    return placeholders
