"""`raises_exactly`: `pytest.raises` with the exact message, keeping no
traceback past the check.

A `with pytest.raises(...) as caught:` around `fit`, `evaluate` or
`predict` keeps the error's traceback in the test's frame, a reference
cycle that also holds Keras' epoch iterator. On TensorFlow that iterator
owns a `tf.data` iterator; when a full garbage collection frees it minutes
later, its destructor can wait for the iterator's autotune thread's next
round (up to a minute; docs/architecture.md, "Tests: where the time
goes"). This helper checks the message, then clears the frames of the
traceback, so the iterator goes when the refused call's frames go.

    with raises_exactly(ValueError, "Encoder: tokens must lie in ..."):
        model.fit(x, y, verbose=0)
"""

import contextlib
import traceback

import pytest


@contextlib.contextmanager
def raises_exactly(exception, message):
    """Expects `exception` whose `str()` is exactly `message`."""
    with pytest.raises(exception) as caught:
        yield
    found = str(caught.value)
    # Frees what the refused call's frames held (finished frames only;
    # `clear_frames` skips the ones still running).
    traceback.clear_frames(caught.tb)
    del caught
    if found != message:
        raise AssertionError(
            f"{exception.__name__} message differs:\n  expected {message!r}"
            f"\n  got      {found!r}"
        )
