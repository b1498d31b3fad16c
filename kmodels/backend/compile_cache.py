"""A compilation cache that outlives the process, on by default where the
backend has one (JAX).

JAX compiles each program again in every new process: the first
`translate` of a fresh process took 5.8 s against 0.02 s for the next one.
JAX can keep what XLA compiled on disk and read it back in the next
process; `enable()`, run by `import kmodels`, turns that on in
`default_folder()`, `~/.cache/kmodels/jax` (or under `$XDG_CACHE_HOME`).
It changes nothing where the user chose: `KMODELS_COMPILATION_CACHE=0`
(also `false`, `off`, `no`) in the environment before `import kmodels`
turns it off, and a folder given to JAX itself
(`JAX_COMPILATION_CACHE_DIR`, or `jax.config` before `import kmodels`)
is kept. TensorFlow and torch: nothing (the facade's default). Measured
for TensorFlow's own persistent XLA cache: no gain on kmodels' programs
(docs/architecture.md). Clear it by deleting the folder.
"""

import os

import keras

from kmodels.backend import native_function

OFF_SWITCH = "KMODELS_COMPILATION_CACHE"
_OFF = ("0", "false", "off", "no")


def default_folder(environ=None):
    """The folder kmodels gives the backend's cache:
    `$XDG_CACHE_HOME/kmodels/<backend>`, `~/.cache/kmodels/<backend>`
    without it.

    Example:

    >>> folder = default_folder({"XDG_CACHE_HOME": "/tmp/c"})
    >>> folder == os.path.join("/tmp/c", "kmodels", keras.backend.backend())
    True
    """
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return os.path.join(base, "kmodels", keras.backend.backend())


def enable(environ=None):
    """Turns the backend's persistent compilation cache on in
    `default_folder()`, unless `KMODELS_COMPILATION_CACHE` says off.

    Returns:
        The folder the backend's cache uses from now on (the user's own
        where one was set), or None (off, or no such cache on this
        backend).
    """
    environ = os.environ if environ is None else environ
    if environ.get(OFF_SWITCH, "").strip().lower() in _OFF:
        return None
    turn_on = native_function("compile_cache", "enable")
    if turn_on is None:
        return None
    return turn_on(default_folder(environ))
