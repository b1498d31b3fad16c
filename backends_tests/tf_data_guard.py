"""TensorFlow runs only: a `tf.data` iterator left alive by a test is
collected when that test ends, not minutes later.

Why: a refused `fit` keeps its `tf.data` iterator in a reference cycle
(Keras' traceback filter re-raises the error from a frame that holds it), so
only a full garbage collection frees it. When that collection comes a minute
or more later, in some other test, the iterator's destructor waits for its
autotune thread's next round, which TensorFlow spaces out up to a minute:
the TensorFlow runs of 2026-12-07 spent 33-62 s in one collection each, in
tests that made no such iterator (`mixed_precision_test[decoder-...]`,
`positional_embedding_test::test_dynamic_layer_contract`). A diagnostic run
named the tests whose iterators outlived them: refused fits on a generator
(`input_contracts_test`), a refused fit with a checkpoint callback
(`growable_embedding_test`), nested refusals (`concurrency_test`), the
seed's shape error (`losses_test`), 19 of 1,354 iterators. Collected at the
end of the test that made them, the same destructors take well under a
second (docs/architecture.md, "Tests: where the time goes").

The guard keeps a weak reference to each iterator a test makes from a
dataset (by wrapping `OwnedIterator.__init__` in this test process only:
TensorFlow offers no creation hook). When one is still alive after the
test, it runs a young collection (about 0.01 s), which frees most, then a
full one (0.5-2 s) only if one is left. The terminal summary says how many
tests needed it. The library itself is not changed: a user who keeps such
an error meets the same wait (docs/architecture.md says what to do).
"""

import gc
import weakref

import pytest

_made = []  # weak references to the iterators of the running test
_collected = []  # (test id, iterators alive at its end)


def _track(init):
    def tracked(self, dataset=None, **kwargs):
        init(self, dataset=dataset, **kwargs)
        # Only an iterator made from a dataset owns the iterator threads;
        # `tf.function` rebuilds the ones it is given from their components.
        if dataset is not None:
            _made.append(weakref.ref(self))

    return tracked


class TfDataGuard:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        _made.clear()
        yield
        made = list(_made)
        _made.clear()
        alive = sum(ref() is not None for ref in made)
        if alive:
            # A young collection first (about 0.01 s) frees most; a full
            # one (0.5-2 s with TensorFlow loaded) only when it did not.
            gc.collect(1)
            if any(ref() is not None for ref in made):
                gc.collect()
            _collected.append((item.nodeid, alive))

    def pytest_terminal_summary(self, terminalreporter):
        if _collected:
            terminalreporter.write_line(
                f"tf_data_guard: {len(_collected)} tests left "
                f"{sum(n for _, n in _collected)} tf.data iterators alive; "
                "collected at their end"
            )


def register(config, backend):
    """Installs the guard on TensorFlow (the other backends make no
    `tf.data` iterators in `fit`)."""
    if backend != "tensorflow":
        return
    from tensorflow.python.data.ops import iterator_ops

    iterator_ops.OwnedIterator.__init__ = _track(
        iterator_ops.OwnedIterator.__init__
    )
    config.pluginmanager.register(TfDataGuard(), "kmodels-tf-data-guard")
