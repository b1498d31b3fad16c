"""JAX side of `kmodels.backend.compile_cache`."""

import os

import jax

# JAX writes a program to its persistent cache only if it compiled for at
# least this long (JAX's default, 1 s): none of the dates translator's
# programs does, so with it a second process gained nothing (first
# `translate` 3.57 s against 3.78 s in the first process, 0 entries); with
# 0, 1.40 s (`benchmarks/first_call.py`, 2026-12-06). kmodels sets 0 where
# it chose the folder and the user did not choose a threshold.
_MIN_SECONDS = "jax_persistent_cache_min_compile_time_secs"
_MIN_SECONDS_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
_JAX_DEFAULT_MIN_SECONDS = 1.0


def enable(folder):
    # A folder the user gave JAX (`JAX_COMPILATION_CACHE_DIR`, read by
    # JAX at import, or `jax.config`) stands, with all their settings.
    chosen = jax.config.jax_compilation_cache_dir
    if chosen:
        return chosen
    jax.config.update("jax_compilation_cache_dir", folder)
    user_threshold = _MIN_SECONDS_ENV in os.environ or (
        getattr(jax.config, _MIN_SECONDS) != _JAX_DEFAULT_MIN_SECONDS
    )
    if not user_threshold:
        jax.config.update(_MIN_SECONDS, 0.0)
    return folder
