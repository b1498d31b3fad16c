"""torch side of `kmodels.backend.compiled`."""


def compile_reader(fn, variables):
    # Eager: torch reads the variables' current values as it runs.
    return fn


def compile_inference_loop(fn, variables):
    return compile_reader(fn, variables)


def may_compile_eager_call(values):
    # torch's eager call is already fast and differentiable: never compiled.
    return False
