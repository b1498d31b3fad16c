"""Compiling an inference function that reads Keras variables."""

from kmodels.backend import keras_internals
from kmodels.backend import native_function


def compile_reader(fn, variables):
    """A callable equivalent to `fn`, compiled once for the backend.

    It runs as one compiled graph on TensorFlow (`tf.function`) and JAX
    (`jax.jit`, with the variables' current values passed in as arguments
    through a `keras.StatelessScope`, so updated weights are seen without
    retracing) and eagerly on torch. `fn` must only read `variables`, never
    assign them.

    Args:
        fn: the function to compile.
        variables: the Keras variables `fn` reads.
    """
    compile_fn = native_function("compiled", "compile_reader")
    # torch: eager, reading the variables' current values as it runs.
    return fn if compile_fn is None else compile_fn(fn, variables)


def compile_inference_loop(fn, variables):
    """`compile_reader` for an inference loop that is never differentiated
    (a generation loop).

    On TensorFlow it also compiles with XLA (`jit_compile=True`): the loop
    is many small operations, for which TensorFlow's graph executor pays
    per operation; a greedy `Translator.generate` ran 1.8x (units 32) to
    2.5x (units 256) faster with it on the 2-core CPU, for about 1 s more
    on the first call. XLA cannot differentiate through a `tf.while_loop`
    across the function boundary ("TensorList crossing the XLA/TF
    boundary"), which is why `compile_reader`, used for eager calls under
    a `tf.GradientTape`, does without. The same as `compile_reader`
    elsewhere.

    Args:
        fn: the function to compile.
        variables: the Keras variables `fn` reads.
    """
    compile_fn = native_function("compiled", "compile_inference_loop")
    if compile_fn is None:
        return compile_reader(fn, variables)
    return compile_fn(fn, variables)


def xla_train_step():
    """True where kmodels' own models (`Translator`, `Autoencoder`) compile
    their train, test and predict steps with XLA when `compile` is given
    `jit_compile="auto"` (the default) and Keras' own choice is not to:
    TensorFlow on a CPU-only machine (Keras turns XLA off there; the
    Seq2Seq train step of `benchmarks` ran 1.3-1.4x faster with it on the
    2-core CPU, for 5-6 s more compilation). False elsewhere: Keras
    already compiles with XLA on JAX and on TensorFlow with an
    accelerator, and runs torch eagerly.

    Only the answer for a model outside `tf.distribute` (Keras keeps XLA
    off under a strategy, and so does kmodels).
    """
    xla = native_function("compiled", "xla_train_step")
    return False if xla is None else xla()


def may_compile_eager_call(values):
    """True when a layer call on `values` may run a compiled function.

    `values` are the call's input tensors (backend tensors, NumPy arrays
    already converted). True when every one holds data and the call runs
    eagerly at the top level: not inside a `tf.function`, a JAX trace
    (`jax.jit`, `jax.grad`: the inputs are tracers), a
    `keras.StatelessScope` (`stateless_call`, JAX's `fit`) or a symbolic
    (functional) call. An active `tf.GradientTape` is allowed: a
    `tf.function` call is differentiable. Always False on torch, whose
    eager call is fast and differentiable as it is.

    Args:
        values: the flattened input tensors of the call.
    """
    if (
        keras_internals.in_stateless_scope()
        or keras_internals.in_symbolic_scope()
    ):
        return False
    may_compile = native_function("compiled", "may_compile_eager_call")
    return False if may_compile is None else may_compile(values)


def model_export_refusal(owner):
    """Why Keras' `Model.export` cannot write kmodels' `Translator` on the
    running backend (a message starting with `owner`), or None where it can
    (TensorFlow and JAX: `format="tf_saved_model"`, `"litert"` on
    TensorFlow).

    On torch no format round-trips the model with this project's packages
    (docs/export.md, "`Translator.export`: the logits model"): Keras fails
    deep in its exporter (`tf_saved_model` needs `torch_xla`), or writes a
    program that refuses other shapes than its sample inputs (`"torch"`).
    """
    refusal = native_function("compiled", "model_export_refusal")
    return None if refusal is None else refusal(owner)
