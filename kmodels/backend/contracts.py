"""What the input contracts (`kmodels.contracts`) need of the backend.

A compiled step cannot raise on data on JAX, and raises something different
on each backend elsewhere, so kmodels checks the concrete batches before
each compiled step instead, with a `kmodels.backend.steps` hook. Reading a
batch is the one thing that differs per backend: `local_numpy`; and with
several processes (JAX), agreeing on a refusal: `processes_refusing`.
"""

from kmodels.backend import native
from kmodels.backend import native_function


def local_numpy(x):
    """The values of the concrete tensor `x` this process holds, as a NumPy
    array: all of them (a `tf.distribute` batch split between replicas:
    the replicas' parts, concatenated), except for a JAX array spread over
    several processes (`jax.distributed`), which no process can read
    whole: its local shards, stacked along the first (batch) axis. Each
    process then checks the part of the batch it holds."""
    return native.contracts.local_numpy(x)


def processes_refusing(refused):
    """The indices of the processes whose checks refused their part of a
    batch, `refused` being this process's answer: a collective every
    process of a multi-process JAX run (`jax.distributed`) calls at the
    same point, so that all of them raise where one refuses, instead of
    the others waiting for it in the step's collectives forever. `[0]` or
    `[]` elsewhere (one process)."""
    gather = native_function("contracts", "processes_refusing")
    if gather is None:
        return [0] if refused else []
    return gather(refused)
