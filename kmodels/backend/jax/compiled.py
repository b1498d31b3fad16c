"""JAX side of `kmodels.backend.compiled`."""

import jax
import keras
from jax._src import core as jax_core


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


def may_compile_eager_call(values):
    # Inside jax.jit / grad / vmap the inputs are tracers; a concrete value
    # closed over by a traced function is caught by the trace state.
    if not jax_core.trace_state_clean():
        return False
    return all(
        isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer)
        for v in values
    )
