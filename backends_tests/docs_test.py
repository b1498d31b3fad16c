"""Every Python block of README.md and docs/ runs as written, on every
backend.

The blocks of a page run in order in one namespace, in a fresh folder, as a
reader pastes them one after the other; each top-level expression whose
line ends with a comment that reads as a value without floats (`# 8`,
`# (2, 6), (2, 6, 4)`, `# array([1, 2])`, `# ['[UNK]']`, also the part
before `: ` as in `# 256: never more`) must equal that value: the page's
own words are the oracle. Comments that do not read as such a value
(prose, reprs, trained scores) are not compared.

A block that cannot run here says why next to it, in an HTML comment on
the line before its fence:

- `<!-- docs_test: not run: <reason> -->` (a fragment of a larger
  program, a script for `torchrun`, a block that must start its own
  process before Keras is imported...);
- `<!-- docs_test: backends jax tensorflow: <reason> -->`: it runs on those
  backends only.
"""

import ast
import io
import os
import pathlib
import re
import tokenize

import keras
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
_FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_MARK = re.compile(r"<!--\s*docs_test:\s*(.*?)\s*-->\s*$", re.S)
_BACKENDS = ("tensorflow", "jax", "torch")


def blocks(page):
    """`[(line, code, marker or None)]` of a page's Python blocks."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARK.search(before)
        found.append((line, match.group(1), marker and marker.group(1)))
    return found


def should_run(marker, backend):
    """`(run, reason)` for a block's marker on `backend`."""
    if marker is None:
        return True, ""
    kind, _, reason = marker.partition(":")
    words = kind.split()
    if not reason.strip():
        raise ValueError(f"a docs_test marker needs a reason: {marker!r}")
    if words == ["not", "run"]:
        return False, reason.strip()
    if words and words[0] == "backends" and set(words[1:]) <= set(_BACKENDS):
        return backend in words[1:], reason.strip()
    raise ValueError(f"unknown docs_test marker: {marker!r}")


def _comments(code):
    """`{line: comment text}` of a block's comments."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string[1:].strip()
    return found


def _has_float(value):
    if isinstance(value, float):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "f"
    if isinstance(value, (tuple, list)):
        return any(_has_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return False


def expected_value(comment):
    """The value a comment states (`8`, `array([1, 2])`, `(64, True)`,
    or the part before `: `), or None when it states none or holds a
    float (a trained or timed figure)."""
    for text in (comment, comment.split(": ", 1)[0]):
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            continue
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        if names - {"array", "True", "False", "None"} or any(
            not isinstance(c.func, ast.Name) for c in calls
        ):
            continue
        try:
            value = eval(
                compile(tree, "<comment>", "eval"), {"array": np.array}
            )
        except Exception:
            continue
        return None if _has_float(value) else value
    return None


def assert_same(actual, expected, where):
    if isinstance(actual, np.ndarray) or keras.ops.is_tensor(actual):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(actual),
            np.asarray(expected),
            err_msg=where,
        )
        return
    if isinstance(expected, (tuple, list)):
        actual = list(actual)
        assert len(actual) == len(expected), where
        for a, e in zip(actual, expected):
            assert_same(a, e, where)
        return
    assert actual == expected, (
        f"{where}: got {actual!r}, the page says {expected!r}"
    )


def run_block(code, namespace, where):
    """Runs `code` statement by statement in `namespace`; returns how many
    stated values it compared."""
    tree = ast.parse(code, filename=where)
    comments = _comments(code)
    compared = 0
    for statement in tree.body:
        module = ast.Module(body=[statement], type_ignores=[])
        if isinstance(statement, ast.Expr):
            comment = comments.get(statement.end_lineno)
            expected = None if comment is None else expected_value(comment)
            value = eval(
                compile(ast.Expression(statement.value), where, "eval"),
                namespace,
            )
            if expected is not None:
                assert_same(
                    value, expected, f"{where}, line {statement.end_lineno}"
                )
                compared += 1
            continue
        exec(compile(module, where, "exec"), namespace)
    return compared


def _page_id(page):
    return str(page.relative_to(ROOT))


@pytest.mark.backend_independent(reason="parses Markdown and runs plain Python")
def test_a_stated_value_is_compared():
    namespace = {}
    code = "x = [3, 4]\nx  # [3, 4]\nlen(x)  # 2: two items\nx  # a list\n"
    assert run_block(code, namespace, "ok") == 2
    with pytest.raises(AssertionError, match="the page says 5"):
        run_block("len([1])  # 5\n", {}, "wrong")
    assert expected_value("0.29") is None  # a trained figure
    assert expected_value("array([1, 2]): row 2").tolist() == [1, 2]


@pytest.mark.backend_independent(reason="parses Markdown only")
def test_every_marker_is_known_and_gives_a_reason():
    markers = [m for page in PAGES for _, _, m in blocks(page) if m]
    for marker in markers:
        should_run(marker, "jax")  # raises on an unknown or bare marker
    assert markers  # the pages do use them: a renamed marker would be silent


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if blocks(p)],
    ids=_page_id,
)
def test_page_blocks_run_as_written(page, tmp_path, monkeypatch):
    backend = keras.backend.backend()
    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    keras.utils.set_random_seed(0)
    namespace = {"__name__": "__docs__"}
    ran = 0
    try:
        for line, code, marker in blocks(page):
            run, _ = should_run(marker, backend)
            if not run:
                continue
            run_block(code, namespace, f"{_page_id(page)}:{line}")
            ran += 1
    finally:
        os.environ.clear()
        os.environ.update(environ)
    if ran == 0:
        pytest.skip(f"every block of {_page_id(page)} says why it is not run")
