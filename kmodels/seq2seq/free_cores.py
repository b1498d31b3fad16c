"""kmodels' own models train and predict on the cores other processes leave
free (torch), with a switch to turn it off."""

from kmodels.backend import threads


def adapt_threads_to_load(enabled=True):
    """Turns on or off the choice of torch's thread count from the free
    cores, for `fit`, `evaluate` and `predict` of `Translator` and
    `Autoencoder`; returns the previous setting. On by default.

    On torch, each of those calls counts, when it starts, the cores no
    other process is running on (the machine's runnable tasks in
    `/proc/loadavg`, less this process's own), runs with that many intra-op
    threads (at least one, at most `torch.get_num_threads()`) and puts
    torch's count back when it returns. torch's OpenMP threads spin while
    they wait for a core another process holds: beside a CPU hog per core,
    a dates-demo epoch on the 2-core machine took a median 9-14x longer
    with torch's default two threads than with one (`docs/reliability.md`
    has the numbers). A count the user chose stands: one set with
    `torch.set_num_threads` after `import kmodels`, or by
    `OMP_NUM_THREADS` / `MKL_NUM_THREADS`; so does torch's count under
    `OMP_WAIT_POLICY=PASSIVE` (its threads sleep instead of spinning). A
    no-op on TensorFlow and JAX, and where `/proc` is missing (not Linux).

    Args:
        enabled: bool. `False` keeps torch's count as it is in every call.

    Example:

    ```python
    import kmodels

    previous = kmodels.seq2seq.adapt_threads_to_load(False)
    # ... fit with torch's own thread count ...
    kmodels.seq2seq.adapt_threads_to_load(previous)
    ```
    """
    if not isinstance(enabled, bool):
        raise TypeError(
            "adapt_threads_to_load expects enabled to be True or False; "
            f"got {enabled!r} of type {type(enabled).__name__}."
        )
    return threads.set_adaptive(enabled)


class FreeCoreThreads:
    """Mixin of `Translator` and `Autoencoder`: `fit`, `evaluate` and
    `predict` run inside `kmodels.backend.threads.free_core_threads()`
    (see `adapt_threads_to_load`)."""

    def fit(self, *args, **kwargs):
        with threads.free_core_threads():
            return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        with threads.free_core_threads():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        with threads.free_core_threads():
            return super().predict(*args, **kwargs)
