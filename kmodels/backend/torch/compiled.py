"""torch side of `kmodels.backend.compiled`."""


def compile_reader(fn, variables):
    # Eager: torch reads the variables' current values as it runs.
    return fn


def may_compile_eager_call(values):
    # torch's eager call is already fast and differentiable: never compiled.
    return False
