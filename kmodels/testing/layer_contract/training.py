"""The training check of `run_layer_test`: one `fit` step of the layer in
a functional model, and which weights it changes."""

import keras
import numpy as np
from keras import tree

from kmodels.contracts import enforce
from kmodels.testing.layer_contract.calls import FLOATS
from kmodels.testing.layer_contract.calls import call_layer
from kmodels.testing.layer_contract.calls import dtype_of
from kmodels.testing.layer_contract.calls import values_of


def randomize(layer):
    """Sets every float weight to uniform draws in [0.1, 0.5) (seed 0), so
    that none keeps its initial value (a lost zero bias would reload as
    zeros, unnoticed). Positive: optimizer slots such as Adam's velocity
    must not be negative."""
    rng = np.random.default_rng(0)
    for w in layer.weights:
        if dtype_of(w) in FLOATS:
            w.assign(rng.uniform(0.1, 0.5, tuple(w.shape)).astype("float32"))


def functional_model(layer, input_data, call_kwargs):
    """`layer` called on `keras.Input`s (batch size left free) in a
    functional model, with the inputs that reach a kmodels layer checked
    before each compiled step, as a user builds one (`kmodels.contracts`).
    A `keras.Model` is returned as it is."""
    if isinstance(layer, keras.Model):
        return layer
    if isinstance(input_data, dict):
        inputs = {
            k: keras.Input(np.shape(v)[1:], dtype=dtype_of(v), name=k)
            for k, v in input_data.items()
        }
    else:
        inputs = tree.map_structure(
            lambda v: keras.Input(np.shape(v)[1:], dtype=dtype_of(v)),
            input_data,
        )
    return enforce(keras.Model(inputs, call_layer(layer, inputs, call_kwargs)))


def check_training_step(
    model,
    layer,
    input_data,
    eager,
    training_target,
    loss,
    fit_kwargs,
    updated_non_trainable_weights,
    where,
):
    if training_target is None:
        rng = np.random.default_rng(0)
        training_target = tree.map_structure(
            lambda x: rng.standard_normal(tuple(x.shape)).astype("float32"),
            eager,
        )
    trainable = list(layer.trainable_weights)
    frozen = list(layer.non_trainable_weights)
    before = values_of(trainable), values_of(frozen)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    batch = len(tree.flatten(input_data)[0])
    model.fit(
        input_data,
        training_target,
        batch_size=batch,
        epochs=1,
        shuffle=False,
        verbose=0,
        **(fit_kwargs or {}),
    )
    after = values_of(trainable), values_of(frozen)
    unchanged = [
        w.path
        for w, b, a in zip(trainable, before[0], after[0])
        if b.shape == a.shape and np.array_equal(b, a)
    ]
    if unchanged:
        raise AssertionError(
            f"{where}: one training step left the trainable weights "
            f"{unchanged} unchanged (no gradient reaches them?)."
        )
    names = set(updated_non_trainable_weights)
    for w, b, a in zip(frozen, before[1], after[1]):
        changed = b.shape != a.shape or not np.array_equal(b, a)
        declared = w.path.split("/")[-1] in names
        if changed != declared:
            raise AssertionError(
                f"{where}: one training step "
                f"{'changed' if changed else 'left unchanged'} the "
                f"non-trainable weight {w.path}; declared "
                f"{'updated' if declared else 'fixed'}."
            )
