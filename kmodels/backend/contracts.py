"""Backend hooks for the input contracts (`kmodels.contracts`).

A compiled step cannot raise on data on JAX, and raises something different
on each backend elsewhere, so kmodels checks the concrete batches before
each compiled step instead. The only thing that differs per backend is the
signature of the functions `make_train_function`, `make_test_function` and
`make_predict_function` build, hence one function:

- `wrap_step_function(model, kind, check, scope)`: replaces
  `model.<kind>_function` (`kind` in `"train"`, `"test"`, `"predict"`) by a
  function that calls `check(batches, training)` on the batches the step is
  about to consume, then runs the original step on them inside `scope()`
  (`kmodels.contracts.checked`: the layers skip their own checks).
  When `check` raises, the step does not run, and the model's state is
  written back to its variables where the trainer had taken it out (JAX),
  bit-identical.
"""

from kmodels.backend import native

MARK = "_kmodels_contract_original"


def local_numpy(x):
    """The values of the concrete tensor `x` this process holds, as a NumPy
    array: all of them (a `tf.distribute` batch split between replicas:
    the replicas' parts, concatenated), except for a JAX array spread over
    several processes (`jax.distributed`), which no process can read
    whole: its local shards, stacked along the first (batch) axis. Each
    process then checks the part of the batch it holds."""
    return native.contracts.local_numpy(x)


def wrap_step_function(model, kind, check, scope):
    function = getattr(model, f"{kind}_function")
    if function is None or hasattr(function, MARK):
        return
    wrapped = native.contracts.wrap(model, kind, function, check, scope)
    setattr(wrapped, MARK, function)
    setattr(model, f"{kind}_function", wrapped)
