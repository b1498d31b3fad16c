"""torch side of `kmodels.backend.compiled`."""


def compile_reader(fn, variables):
    # Eager: torch reads the variables' current values as it runs.
    return fn
