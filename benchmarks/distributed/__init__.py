"""Scaling benchmark: data-parallel training vs device count.

`python -m benchmarks.distributed [--quick] [--out DIR]` trains the
Transformer encoder classifier and the Translator on 1, 2 and 4 virtual CPU
devices with each backend's data-parallel engine (`keras.distribution.
DataParallel` on JAX, `tf.distribute.MirroredStrategy` on TensorFlow; torch
has none), one fresh subprocess per backend and device count, and reports
median ms/step, examples/s, speed-up over 1 device and efficiency, for the
same global batch (strong scaling) and the same per-device batch (weak
scaling). Prints the table and writes `<out>/distributed-<date>.json` and
`<out>/distributed-<date>.md` (the table as Markdown, for
`docs/distributed.md`).

Modules, each importing only those above it:
- `scaling`: the sizes, the batches each device count runs and the
  speed-up arithmetic;
- `engines`: each backend's data-parallel engine;
- `child`: the subprocess that measures one backend and device count;
- `report`: the JSON document, its checks and its tables;
- `runner`: the command line, which starts one child per configuration.
"""

__all__ = []
