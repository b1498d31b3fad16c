import threading
import warnings

import keras

from kmodels.arguments import check_float
from kmodels.arguments import check_int


class LookAheadWarning(RuntimeWarning):
    """A `LookAheadLimit` generator read past its bound (see `overruns`)."""


class LookAheadLimit(keras.callbacks.Callback):
    """Keeps a data generator at most `max_ahead` batches ahead of the
    train step, so that work done when a batch is *read* (a key lookup in
    a bounded `KeyIndex`, say) happens in training order.

    `fit` reads batches before the step that trains them: Keras' generator
    adapter reads the first two when `fit` starts, and TensorFlow prefetches
    generator batches with an autotuned `tf.data` buffer whose depth grows
    with the machine's load (8 batches and more were seen). For a
    `GrowableEmbedding` whose `KeyIndex` evicts (`max_capacity`), a lookup
    too far ahead can evict a key whose last batch has not trained yet, and
    the results then depend on the machine's load. Wrap the generator with
    the callback and pass the callback to `fit`: the generator waits (in
    TensorFlow's prefetch thread) until training is at most `max_ahead`
    batches behind.

    The limit never stops training. A read that cannot wait goes on past
    the bound, counted in `overruns`, with one `LookAheadWarning` per
    wrapped generator that says why: no train step began for `timeout`
    seconds (a step, or its compilation, took that long), the callback is
    not in `fit`'s callbacks, or the read runs in the thread that trains
    (where waiting cannot help: JAX and torch read one batch per step
    there, so it does not happen with `max_ahead >= 1`). If `fit` raises
    on TensorFlow while the generator waits, TensorFlow's teardown of the
    pipeline waits for it, at most `timeout` seconds. A limit in `fit`'s
    callbacks with no generator wrapped for that `fit` warns when `fit`
    starts (nothing would be limited). When `fit` ends, the
    wrapped generator ends too (a batch read then would train nowhere):
    wrap one generator per `fit`.

    Args:
        max_ahead: int >= 1, the most batches read beyond the one training
            (Keras' generator adapter reads batch 1 before step 0).
        timeout: seconds a read waits for a train step to begin before it
            goes on past the bound.

    Attributes:
        max_seen: the largest look-ahead of the last wrapped generator.
        overruns: its reads past the bound.

    Example:

    ```python
    pace = kmodels.callbacks.LookAheadLimit(max_ahead=2)

    def batches():
        for keys, target in stream:
            yield index.lookup(keys).reshape(-1, 1), target

    model.fit(
        pace(batches()), steps_per_epoch=len(stream), shuffle=False,
        callbacks=[kmodels.callbacks.EmbeddingGrowth(), pace],
    )
    pace.max_seen  # <= 2
    ```
    """

    def __init__(self, max_ahead=2, timeout=60.0):
        super().__init__()
        owner = "LookAheadLimit"
        self.max_ahead = check_int(max_ahead, "max_ahead", owner, minimum=1)
        self.timeout = check_float(
            timeout, "timeout", owner, minimum=0, exclusive_minimum=True
        )
        self.max_seen = self.overruns = 0
        self._changed = threading.Condition()
        self._read = self._begun = 0
        self._warned = self._ended = self._wrapped = False
        self._thread = None
        self._per_call = 1

    def __call__(self, batches):
        """Returns a generator over `batches` (any iterable) that reads
        at most `max_ahead` batches ahead of training. Starts counting
        anew: wrap one generator per `fit`."""
        try:
            batches = iter(batches)
        except TypeError:
            raise TypeError(
                "LookAheadLimit: expected an iterable of batches (a "
                f"generator, say); got {type(batches).__name__}."
            ) from None
        with self._changed:
            self._read = self._begun = self.max_seen = self.overruns = 0
            self._warned = self._ended = False
            self._thread = None
            self._wrapped = True
        return self._paced(batches)

    def _paced(self, batches):
        while self._wait_for_training():
            try:
                batch = next(batches)
            except StopIteration:
                return
            yield batch

    def _ahead(self):
        # Batches read beyond the one training now (or about to).
        return self._read - max(self._begun - 1, 0)

    def _wait_for_training(self):
        """Waits until the next read is within the bound; False when `fit`
        has ended (nothing will train what is read next)."""
        with self._changed:
            reason = None
            if self._ahead() <= self.max_ahead or self._ended:
                pass
            elif self._thread is None:
                reason = "the LookAheadLimit is not in fit's callbacks"
            elif threading.current_thread() is self._thread:
                reason = "fit read it in the thread that trains"
            elif not self._changed.wait_for(
                lambda: self._ahead() <= self.max_ahead or self._ended,
                self.timeout,
            ):
                reason = f"no train step began for {self.timeout:g} s"
            if self._ended:
                return False
            if reason is not None:
                self.overruns += 1
                if not self._warned:
                    self._warned = True
                    warnings.warn(
                        f"LookAheadLimit(max_ahead={self.max_ahead}): batch "
                        f"{self._read} read {self._ahead()} batches ahead of "
                        f"training, because {reason}; reads go past the "
                        "bound while this lasts (see `overruns`).",
                        LookAheadWarning,
                        stacklevel=2,
                    )
            self.max_seen = max(self.max_seen, self._ahead())
            self._read += 1
            return True

    def on_train_begin(self, logs=None):
        if not self._wrapped:
            warnings.warn(
                f"LookAheadLimit(max_ahead={self.max_ahead}) is in fit's "
                "callbacks, but no generator was wrapped with it for this "
                "fit: nothing is limited. Pass the wrapped data: "
                "fit(pace(generator), ..., callbacks=[pace]).",
                LookAheadWarning,
                stacklevel=2,
            )
        self._thread = threading.current_thread()
        self._ended = False
        # Batches per step call. Read once: on JAX, `self.model` syncs the
        # model's state each time.
        self._per_call = getattr(self.model, "steps_per_execution", 1) or 1

    def on_train_batch_begin(self, batch, logs=None):
        with self._changed:
            self._begun += self._per_call
            self._changed.notify_all()

    def on_train_end(self, logs=None):
        # A read waiting now (TensorFlow's prefetch of a longer generator)
        # ends the generator instead of holding the pipeline's teardown.
        with self._changed:
            self._ended = True
            self._wrapped = False
            self._changed.notify_all()
