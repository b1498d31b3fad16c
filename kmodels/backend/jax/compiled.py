"""JAX side of `kmodels.backend.compiled`."""

import jax
import keras


def compile_reader(fn, variables):
    # The variables' current values go in as arguments (through a
    # StatelessScope), so updated weights are seen without retracing.
    variables = list(variables)

    def pure(values, *args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return fn(*args)

    jitted = jax.jit(pure)

    def call(*args):
        return jitted([v.value for v in variables], *args)

    return call
