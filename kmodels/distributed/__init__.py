"""Running kmodels on several devices with Keras' own distribution engines.

`keras.distribution` (JAX: data and model parallel, multi-host),
`tf.distribute` (TensorFlow) and torch's `DistributedDataParallel` do the
work; this package adds what kmodels needs on top of them. See
`docs/distributed.md`.
"""

from kmodels.distributed.embedding_sharding import shard_embedding_rows
from kmodels.distributed.replicated_tables import replicate_tables
from kmodels.distributed.virtual_devices import virtual_cpu_devices

__all__ = [
    "replicate_tables",
    "shard_embedding_rows",
    "virtual_cpu_devices",
]
