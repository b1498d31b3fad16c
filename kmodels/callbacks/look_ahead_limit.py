import threading

import keras

from kmodels.arguments import check_float
from kmodels.arguments import check_int


class LookAheadError(RuntimeError):
    """A `LookAheadLimit` generator could not stay within its bound."""


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

    Args:
        max_ahead: int >= 1, the most batches read beyond the one training
            (Keras' generator adapter reads batch 1 before step 0).
        timeout: seconds the generator waits for training before it
            raises a `LookAheadError` (training died or stalled).

    Attributes:
        max_seen: the largest look-ahead of the last wrapped generator.

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

    On JAX and torch (CPU) the generator runs in the training thread and
    Keras reads one batch per step, so the bound holds without waiting; a
    read that would pass it in that thread raises a `LookAheadError` at
    once (waiting there cannot help).
    """

    def __init__(self, max_ahead=2, timeout=60.0):
        super().__init__()
        owner = "LookAheadLimit"
        self.max_ahead = check_int(max_ahead, "max_ahead", owner, minimum=1)
        self.timeout = check_float(
            timeout, "timeout", owner, minimum=0, exclusive_minimum=True
        )
        self.max_seen = 0
        self._changed = threading.Condition()
        self._read = 0
        self._begun = 0
        self._thread = None
        self._per_call = 1

    def __call__(self, batches):
        """Returns a generator over `batches` (any iterable) that reads
        at most `max_ahead` batches ahead of training. Starts counting
        anew: wrap one generator per `fit`."""
        with self._changed:
            self._read = self._begun = self.max_seen = 0
        return self._paced(iter(batches))

    def _paced(self, batches):
        while True:
            self._wait_for_training()
            try:
                batch = next(batches)
            except StopIteration:
                return
            yield batch

    def _ahead(self):
        # Batches read beyond the one training now (or about to).
        return self._read - max(self._begun - 1, 0)

    def _wait_for_training(self):
        with self._changed:
            if self._ahead() > self.max_ahead:
                if threading.current_thread() is self._thread:
                    raise LookAheadError(
                        f"LookAheadLimit(max_ahead={self.max_ahead}): fit "
                        f"read batch {self._read} after {self._begun} train "
                        "steps began, in the thread that trains, where "
                        "waiting cannot help; raise max_ahead."
                    )
                if not self._changed.wait_for(
                    lambda: self._ahead() <= self.max_ahead, self.timeout
                ):
                    raise LookAheadError(
                        f"LookAheadLimit(max_ahead={self.max_ahead}): batch "
                        f"{self._read} waited {self.timeout:g} s for step "
                        f"{self._read - self.max_ahead} to begin; "
                        f"{self._begun} train steps began."
                    )
            self.max_seen = max(self.max_seen, self._ahead())
            self._read += 1

    def on_train_begin(self, logs=None):
        self._thread = threading.current_thread()
        # Batches per step call. Read once: on JAX, `self.model` syncs the
        # model's state each time.
        self._per_call = getattr(self.model, "steps_per_execution", 1) or 1

    def on_train_batch_begin(self, batch, logs=None):
        with self._changed:
            self._begun += self._per_call
            self._changed.notify_all()

    def on_train_end(self, logs=None):
        self._thread = None
