"""The facts a results document records about its run: when, on which
machine, with which versions."""

import datetime
import importlib.metadata
import os
import platform
import time

# The distributions whose versions a run records.
VERSIONED = ("keras", "keras-hub", "tensorflow", "tf_keras", "jax", "torch",
             "numpy")  # fmt: skip


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def created():
    """The run's time stamp, e.g. "2026-11-29 19:32 UTC"."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def machine():
    """The machine facts a results document records."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def versions():
    """`{distribution: version}` of the installed `VERSIONED` ones."""
    out = {}
    for dist in VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out
