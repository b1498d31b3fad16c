"""torch side of `kmodels.backend.compiled`."""


def compile_reader(fn, variables):
    # Eager: torch reads the variables' current values as it runs.
    return fn


def compile_inference_loop(fn, variables):
    return compile_reader(fn, variables)


def xla_train_step():
    # Eager by default (`torch.compile` is another trade-off).
    return False


def may_compile_eager_call(values):
    # torch's eager call is already fast and differentiable: never compiled.
    return False
