"""JAX side of `kmodels.backend.replicas`."""


def sum_over_replicas(x):
    # `keras.distribution` runs one SPMD program over the global batch.
    return x


def in_replica_function():
    # No replica threads: one SPMD program (JAX) or one process per
    # replica (torch).
    return False
