"""Backend-specific code, chosen once, when this package is imported.

Model code never imports TensorFlow, JAX or torch, and never tests
`keras.backend.backend()`: where a backend needs its own path, it calls a
function of one of the modules below, e.g.

    from kmodels.backend import growth

    growth.resize_variable(variable, value)

As in Keras (`keras/src/backend/__init__.py`), the backend is picked here,
from `keras.backend.backend()`, when `kmodels.backend` is first imported:
`native` is then one of the packages `kmodels.backend.tensorflow`,
`kmodels.backend.jax` and `kmodels.backend.torch`; only they import
TensorFlow, JAX or torch. Another backend (`numpy`, `openvino`) raises a
`ValueError` at import.

The modules of this package are the interface: they document each
function, hold what is the same on every backend, and call the backend's
own form of it. A function every backend implements is called as
`native.<module>.<function>`. Where some backends have nothing to do, the
facade owns the default (what its docstring says happens elsewhere:
return the argument, `False`, `None`, ...) and only the backends that
differ define the function; the facade asks for it with
`native_function("<module>", "<function>")`, which is None where the
running backend does not define it. A backend package thus holds only
modules of the facade's names (none where it has nothing of that module to
do), and each defines only functions its facade calls
(`backends_tests/backend/interface_test.py`).

- `growth`: tables that grow between train steps
  (`kmodels.layers.GrowableEmbedding`, `kmodels.callbacks.EmbeddingGrowth`):
  resizing a variable in place, sparse row updates in the backward pass,
  growing before each compiled step, the row shards of a distribution.
- `contracts`: the hook that checks each batch before a compiled train,
  test or predict step (`kmodels.contracts`).
- `gradients`: gradients with the backend's own autodiff
  (`kmodels.diagnostics`, `kmodels.testing`).
- `losses`: the per-position cross-entropy of integer labels in each
  backend's fastest form (`kmodels.seq2seq.masked_loss`).
- `optimizers`: Keras' Adam update in one fused pass on torch, with the
  same numbers (`kmodels.saving`'s models install it at `compile`).
- `replicas`: sums over the replicas of a `tf.distribute` step (the
  identity elsewhere).
- `compiled`: one compiled function that reads Keras variables
  (`tf.function`, `jax.jit`; eager on torch); generation loops with XLA on
  TensorFlow.
- `decoding`: the greedy generation loop in torch operations (torch runs
  `Translator.generate` eagerly, where Keras' per-layer overhead dominates);
  None elsewhere.
- `rnn`: how `kmodels.seq2seq` runs its GRUs: `kmodels.seq2seq.gru`'s
  recurrence where it is faster than Keras' layers (and its loop, custom
  gradient and torch operations), or Keras' layers, unmasked on a
  right-padded batch where that reaches a fused kernel (torch on CUDA).
- `compiled` also says where kmodels' models compile with XLA by default
  (TensorFlow on the CPU), and where Keras' `Model.export` cannot write a
  `Translator` (torch).
- `compile_cache`: a compilation cache that outlives the process (JAX),
  turned on by `import kmodels`.
- `virtual_devices`: several CPU devices in one process
  (`kmodels.distributed.virtual_cpu_devices`).
- `table_replicas`: the collectives that keep the replicas of a growable
  table identical under torch `DistributedDataParallel`
  (`kmodels.distributed.replicate_tables`); it raises on TensorFlow and JAX.

`kmodels.backend.common` holds the backend-independent helpers the
per-backend modules share. Nothing here imports another kmodels package
(only the root `kmodels`, for its list of supported backends).
"""

import keras

from kmodels import BACKENDS as SUPPORTED_BACKENDS

if keras.backend.backend() == "tensorflow":
    from kmodels.backend import tensorflow as native
elif keras.backend.backend() == "jax":
    from kmodels.backend import jax as native
elif keras.backend.backend() == "torch":
    from kmodels.backend import torch as native
else:
    raise ValueError(
        "kmodels supports the Keras backends 'tensorflow', 'jax' and "
        f"'torch'; the running backend is {keras.backend.backend()!r}. Set "
        "KERAS_BACKEND to one of them before importing Keras."
    )


def native_function(module, name):
    """The running backend's `native.<module>.<name>`, or None where its
    package does not define it (no such module, or no such function in it):
    then the facade `kmodels.backend.<module>` does its default.

    Example:

    >>> from kmodels.backend import native_function
    >>> fuse = native_function("optimizers", "fuse_adam")
    >>> (fuse is None) == (keras.backend.backend() != "torch")
    True
    """
    return getattr(getattr(native, module, None), name, None)


__all__ = ["SUPPORTED_BACKENDS", "native", "native_function"]
