"""backends_tests/tf_data_guard.py: on TensorFlow, a `tf.data` iterator a
test leaves in a reference cycle is collected when that test ends; one the
test freed itself costs no collection."""

import gc
import types
import weakref

import keras
import pytest

from backends_tests.tf_data_guard import TfDataGuard

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the guard is installed on TensorFlow only: `fit` makes no "
    "tf.data iterator on JAX and torch",
)


@pytest.fixture
def no_collection():
    gc.disable()
    yield
    gc.enable()


def _run_as_a_test(body):
    """Runs `body()` between the guard's before and after a test; returns
    what `body` returned and the guard's record of that test."""
    guard = TfDataGuard()
    item = types.SimpleNamespace(nodeid="inner::test")
    hook = guard.pytest_runtest_protocol(item=item, nextitem=None)
    next(hook)
    from backends_tests import tf_data_guard

    before = list(tf_data_guard._collected)
    result = body()
    with pytest.raises(StopIteration):
        hook.send(None)
    record = tf_data_guard._collected[len(before) :]
    del tf_data_guard._collected[len(before) :]
    return result, record


def test_an_iterator_left_in_a_cycle_goes_at_the_tests_end(no_collection):
    import tensorflow as tf

    def body():
        iterator = iter(tf.data.Dataset.range(3))
        cycle = [iterator]
        cycle.append(cycle)
        return weakref.ref(iterator)

    ref, record = _run_as_a_test(body)
    assert ref() is None
    assert record == [("inner::test", 1)]


def test_an_iterator_freed_by_the_test_costs_no_collection(no_collection):
    import tensorflow as tf

    def body():
        iterator = iter(tf.data.Dataset.range(3))
        assert [int(x) for x in iterator] == [0, 1, 2]
        ref = weakref.ref(iterator)
        del iterator
        return ref

    ref, record = _run_as_a_test(body)
    assert ref() is None
    assert record == []
