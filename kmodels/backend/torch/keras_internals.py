"""The torch half of `kmodels.backend.keras_internals`: the internals of
Keras' torch optimizers that kmodels relies on, each behind one function
(see that module for the version pin)."""

import keras
from keras.src.backend.torch.optimizers.torch_adam import Adam as _TorchAdam


def is_torch_adam(optimizer):
    """True for Keras' torch Adam exactly (what `compile(optimizer="adam")`
    makes on torch), not a subclass that may change its update. Keras
    exports only the portable class."""
    return type(optimizer) is _TorchAdam


def adam_slots(optimizer, variables):
    """The torch tensors of the first and second moments of `variables`,
    two lists in their order. Keras keeps them in private lists indexed
    by a private method."""
    index = optimizer._get_variable_index
    return (
        [optimizer._momentums[index(v)].value for v in variables],
        [optimizer._velocities[index(v)].value for v in variables],
    )


def keras_adam_update(optimizer):
    """Keras' own update of the torch Adam (its class's), bound to
    `optimizer`: `update(grads, variables, learning_rate)`."""
    return _TorchAdam._parallel_update_step.__get__(optimizer)


def set_adam_update(optimizer, update):
    """Makes `optimizer` run `update(grads, variables, learning_rate)` as
    its update step: the one method Keras' torch optimizers call from
    `apply` after clipping and weight decay, before counting the step."""
    optimizer._parallel_update_step = update


def adam_update(optimizer):
    """The update step `optimizer` runs now (its own, or one set by
    `set_adam_update`)."""
    return optimizer._parallel_update_step


def iterations(optimizer):
    """The optimizer's step counter as a Python int (public variable)."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))
