"""The intra-op thread count of kmodels' models on a busy machine.

torch's OpenMP threads spin while they wait for a core that another
process holds: beside one CPU hog per core, a `Translator` epoch of the
dates demo on torch's default two threads took a median 9-14x the time it
takes on one thread on the 2-core machine (`benchmarks.busy`). So the
entry points of kmodels' own models (`fit`, `evaluate`, `predict` of
`Translator` and `Autoencoder`) run inside `free_core_threads()`: on
torch, it sets the count to the cores no other process is running on
(`threads_for`), at least one and at most the count already set, and
puts the count back when the call returns. It changes nothing where the
user chose the count (`torch.set_num_threads` after kmodels was imported,
or `OMP_NUM_THREADS` / `MKL_NUM_THREADS`), under `OMP_WAIT_POLICY=PASSIVE`
(sleeping threads do not spin), where the machine cannot tell
how busy it is (no `/proc`), after `set_adaptive(False)`, and on
TensorFlow and JAX (the facade's default: their thread pools are theirs
to size).
"""

import contextlib
import os
import statistics
import time

from kmodels.backend import native_function

_SETTINGS = {"adaptive": True}
# Samples of the machine's runnable tasks, this far apart (seconds): a
# process that runs only now and then is seen in some samples, not all.
SAMPLES = 3
SAMPLE_INTERVAL = 0.001


def threads_for(cores, running_elsewhere, current):
    """The intra-op thread count for a call: the cores this process may
    use (`cores`) less the tasks other processes are running
    (`running_elsewhere`), at least 1 and at most `current`, the count
    set now.

    Example:

    >>> threads_for(cores=2, running_elsewhere=2, current=2)
    1
    >>> threads_for(cores=8, running_elsewhere=3, current=8)
    5
    """
    free = int(cores - running_elsewhere)
    return max(1, min(current, free))


def usable_cores():
    """The cores this process may run on (its CPU affinity where the
    platform tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _running_tasks():
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


def _own_running_tasks():
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                # The state follows the command name, which may hold ")".
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        count += state == "R"
    return count


def running_elsewhere():
    """The tasks (threads) other processes are running now: the machine's
    runnable tasks (`/proc/loadavg`) less this process's own, the median
    of `SAMPLES` samples; None where `/proc` does not tell (not Linux).
    Instantaneous, unlike the load average, which lags by a minute and
    counts this process's own past work."""
    values = []
    try:
        for i in range(SAMPLES):
            if i:
                time.sleep(SAMPLE_INTERVAL)
            values.append(max(_running_tasks() - _own_running_tasks(), 0))
    except (OSError, ValueError, IndexError):
        return None
    return statistics.median_low(values)


def set_adaptive(enabled):
    """Turns the choice of threads from the free cores on or off for the
    process; returns the previous setting."""
    previous = _SETTINGS["adaptive"]
    _SETTINGS["adaptive"] = bool(enabled)
    return previous


def adaptive():
    """Whether `free_core_threads()` may change the thread count."""
    return _SETTINGS["adaptive"]


def free_core_threads():
    """A context for one entry point of a kmodels model: on torch, the
    intra-op thread count `threads_for` the free cores for its duration,
    the previous count restored after (see the module's docstring). It
    yields the count chosen, or None where it changed nothing (always on
    TensorFlow and JAX)."""
    scope = native_function("threads", "free_core_scope")
    if scope is None or not _SETTINGS["adaptive"]:
        return contextlib.nullcontext(None)
    return scope(_choose)


def _choose(current):
    elsewhere = running_elsewhere()
    if elsewhere is None:
        return current
    return threads_for(usable_cores(), elsewhere, current)
