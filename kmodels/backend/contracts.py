"""What the input contracts (`kmodels.contracts`) need of the backend.

A compiled step cannot raise on data on JAX, and raises something different
on each backend elsewhere, so kmodels checks the concrete batches before
each compiled step instead, with a `kmodels.backend.steps` hook. Reading a
batch is the one thing that differs per backend: `local_numpy`.
"""

from kmodels.backend import native


def local_numpy(x):
    """The values of the concrete tensor `x` this process holds, as a NumPy
    array: all of them (a `tf.distribute` batch split between replicas:
    the replicas' parts, concatenated), except for a JAX array spread over
    several processes (`jax.distributed`), which no process can read
    whole: its local shards, stacked along the first (batch) axis. Each
    process then checks the part of the batch it holds."""
    return native.contracts.local_numpy(x)
