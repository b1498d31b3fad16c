"""The precision check of `run_layer_test`: output and variable dtypes
under each mixed-precision policy."""

import re

import keras
from keras import tree

from kmodels.backend import keras_internals
from kmodels.testing.layer_contract.calls import FLOATS
from kmodels.testing.layer_contract.calls import build_layer
from kmodels.testing.layer_contract.calls import call_layer
from kmodels.testing.layer_contract.calls import dtype_of
from kmodels.testing.layer_contract.calls import make_layer
from kmodels.testing.layer_contract.calls import symbolic_inputs

PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def _traced(layer, input_data, call_kwargs):
    """The output specs of a call of the built `layer`, traced by the
    backend (`jax.eval_shape`, a TensorFlow graph, torch meta tensors): the
    ops of `call` and their dtypes, without compiling or running them."""
    build_layer(layer, input_data)
    symbolic = symbolic_inputs(input_data)
    if isinstance(input_data, dict):
        return keras_internals.compute_output_spec(
            lambda **kw: layer(**kw, **call_kwargs), **symbolic
        )
    return keras_internals.compute_output_spec(
        lambda x: layer(x, **call_kwargs), symbolic
    )


def _output_dtypes_match(outputs, policy):
    floats = [dtype_of(x) for x in tree.flatten(outputs)]
    return all(d == policy.compute_dtype for d in floats if d in FLOATS)


def _check_output_dtypes(outputs, policy, where, what):
    if not _output_dtypes_match(outputs, policy):
        dtypes = [dtype_of(x) for x in tree.flatten(outputs)]
        raise AssertionError(
            f"{where} under {policy.name}: {what} output dtypes {dtypes}; "
            f"float outputs must be {policy.compute_dtype}."
        )


def check_precision(
    cls, init_kwargs, input_data, call_kwargs, refused_policies, where
):
    for name in PRECISION_POLICIES:
        policy = keras.dtype_policies.get(name)
        if name in refused_policies:
            error, pattern = refused_policies[name]
            try:
                layer = make_layer(cls, init_kwargs, dtype=name)
                _traced(layer, input_data, call_kwargs)
            except error as e:
                if not re.search(pattern, str(e)):
                    raise AssertionError(
                        f"{where} refused {name} with {str(e)!r}, which "
                        f"does not match {pattern!r}."
                    ) from e
                continue
            raise AssertionError(
                f"{where} is declared to refuse {name} with "
                f"{error.__name__}, but it built and ran."
            )
        symbolic = call_layer(
            make_layer(cls, init_kwargs, dtype=name),
            symbolic_inputs(input_data),
            call_kwargs,
        )
        _check_output_dtypes(symbolic, policy, where, "symbolic")
        # Traced first: the dtypes of an eager call without one XLA
        # compilation per policy on JAX (seconds for a GRU). Where the trace
        # disagrees (torch traces on its "meta" device, where Keras'
        # autocasting of variables does not apply), an eager call decides.
        layer = make_layer(cls, init_kwargs, dtype=name)
        if not _output_dtypes_match(
            _traced(layer, input_data, call_kwargs), policy
        ):
            eager = call_layer(layer, input_data, call_kwargs)
            _check_output_dtypes(eager, policy, where, "eager")
        wrong = [
            (w.path, dtype_of(w))
            for w in layer.weights
            if dtype_of(w) in FLOATS and dtype_of(w) != policy.variable_dtype
        ]
        if wrong:
            raise AssertionError(
                f"{where} under {name}: variables {wrong} are not "
                f"{policy.variable_dtype}."
            )
