"""backends_tests/refusals.py: `raises_exactly` checks the exact message
and keeps nothing the refused call's frames held, where a plain
`pytest.raises(...) as caught` keeps it in a reference cycle until a full
garbage collection (for `fit` on TensorFlow: a `tf.data` iterator)."""

import gc
import weakref

import pytest

from backends_tests.refusals import raises_exactly

pytestmark = pytest.mark.backend_independent(
    reason="Python frames and exceptions; no Keras call"
)


class _Held:
    """Stands in for what a refused `fit` holds (its epoch iterator)."""


def _refuse(held):
    kept = held  # noqa: F841 (the refused call's frame holds it)
    raise ValueError("refused: got 3")


@pytest.fixture
def no_collection():
    gc.disable()
    yield
    gc.enable()


def test_plain_raises_keeps_the_frames_until_a_collection(no_collection):
    held = _Held()
    ref = weakref.ref(held)
    with pytest.raises(ValueError) as caught:
        _refuse(held)
    assert str(caught.value) == "refused: got 3"
    del held
    assert ref() is not None
    gc.collect()
    assert ref() is not None  # still reachable: `caught` is a local here
    del caught
    gc.collect()
    assert ref() is None


def test_raises_exactly_frees_the_frames_at_once(no_collection):
    held = _Held()
    ref = weakref.ref(held)
    with raises_exactly(ValueError, "refused: got 3"):
        _refuse(held)
    del held
    assert ref() is None


def test_raises_exactly_checks_the_type_and_the_whole_message():
    with pytest.raises(AssertionError, match="refused: got 3"):
        with raises_exactly(ValueError, "refused"):
            _refuse(_Held())
    with pytest.raises(TypeError, match="^no$"):
        with raises_exactly(ValueError, "no"):
            raise TypeError("no")
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        with raises_exactly(ValueError, "no"):
            pass
