"""JAX side of `kmodels.backend.compile_cache`."""

import jax


def enable(folder):
    # A folder the user gave JAX (`JAX_COMPILATION_CACHE_DIR`, read by
    # JAX at import, or `jax.config`) stands.
    chosen = jax.config.jax_compilation_cache_dir
    if chosen:
        return chosen
    jax.config.update("jax_compilation_cache_dir", folder)
    return folder
