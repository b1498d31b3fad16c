"""torch side of `kmodels.backend.replicas`."""


def sum_over_replicas(x):
    # A Keras step on torch sees the global batch.
    return x


def in_replica_function():
    # No replica threads: one SPMD program (JAX) or one process per
    # replica (torch).
    return False
