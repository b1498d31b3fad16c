"""`import kmodels` turns JAX's persistent compilation cache on in
`~/.cache/kmodels/jax` (`kmodels.backend.compile_cache`), unless the user
chose otherwise; TensorFlow and torch get nothing."""

import os
import subprocess
import sys

import keras
import pytest

from kmodels.backend import compile_cache

# A fresh process: `import kmodels`, one jitted program on JAX (compiled in
# milliseconds), then where JAX's cache points, its compile-time threshold
# and what lies in the kmodels folder.
_CHILD = """
import json, os, sys
import keras
import kmodels
from kmodels.backend import compile_cache
folder = compile_cache.default_folder()
if keras.backend.backend() == "jax":
    import jax
    jax.jit(lambda x: x * 2 + 1)(jax.numpy.arange(3.0)).block_until_ready()
    chosen = jax.config.jax_compilation_cache_dir
    threshold = jax.config.jax_persistent_cache_min_compile_time_secs
else:
    chosen = threshold = None
entries = sorted(os.listdir(folder)) if os.path.isdir(folder) else None
print(json.dumps({"chosen": chosen, "folder": folder, "entries": entries,
                  "threshold": threshold}))
"""


def _child(tmp_path, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "JAX_COMPILATION_CACHE_DIR",
            "KMODELS_COMPILATION_CACHE",
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
        )
    }
    env.update(
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        TF_CPP_MIN_LOG_LEVEL="3",
        **extra,
    )
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.backend_independent(reason="reads a dictionary, no tensors")
def test_default_folder_is_under_the_users_cache():
    backend = keras.backend.backend()
    assert compile_cache.default_folder({"XDG_CACHE_HOME": "/c"}) == (
        os.path.join("/c", "kmodels", backend)
    )
    assert compile_cache.default_folder({}) == os.path.join(
        os.path.expanduser("~"), ".cache", "kmodels", backend
    )


@pytest.mark.parametrize("off", ["0", "false", "OFF", " no "])
def test_the_off_switch_turns_nothing_on(off):
    assert compile_cache.enable({compile_cache.OFF_SWITCH: off}) is None


def test_import_turns_the_cache_on_on_jax_only(tmp_path):
    got = _child(tmp_path)
    folder = str(tmp_path / "cache" / "kmodels" / keras.backend.backend())
    assert got["folder"] == folder
    if keras.backend.backend() == "jax":
        assert got["chosen"] == folder
        # JAX's 1 s threshold lowered to 0: the program, compiled in
        # milliseconds, was written there (one entry per program, plus
        # JAX's access-time files).
        assert got["threshold"] == 0.0
        assert got["entries"], got
    else:
        # TensorFlow and torch: no cache, no folder.
        assert got["chosen"] is None and got["entries"] is None


@pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="JAX is the only backend whose cache kmodels turns on; the two "
    "tests above check that nothing happens on TensorFlow and torch",
)
def test_the_users_choice_stands_on_jax(tmp_path):
    off = _child(tmp_path, KMODELS_COMPILATION_CACHE="0")
    assert off["chosen"] is None and off["entries"] is None
    mine = str(tmp_path / "mine")
    theirs = _child(tmp_path, JAX_COMPILATION_CACHE_DIR=mine)
    assert theirs["chosen"] == mine and theirs["entries"] is None
    # Their folder with JAX's settings as they are: the 1 s threshold.
    assert theirs["threshold"] == 1.0 and not os.listdir(mine)
    # A threshold the user set stands in kmodels' folder: the program,
    # compiled in milliseconds, is not written.
    slow = _child(tmp_path, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="5")
    assert slow["threshold"] == 5.0 and not slow["entries"]
