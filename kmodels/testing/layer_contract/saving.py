"""The saving check of `run_layer_test`: a `.keras` round trip of the
layer in a functional model."""

import os
import tempfile

import numpy as np
from keras import ops
from keras import tree

from kmodels.saving import load_model
from kmodels.saving import save_model
from kmodels.testing.layer_contract.calls import assert_same
from kmodels.testing.layer_contract.calls import check_mask
from kmodels.testing.layer_contract.calls import first_mask
from kmodels.testing.layer_contract.calls import json_of
from kmodels.testing.layer_contract.calls import specs
from kmodels.testing.layer_contract.calls import values_of


def check_saving(model, layer, input_data, expected, tolerance, where):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "layer.keras")
        save_model(model, path)
        loaded = load_model(path)
    restored = loaded if layer is model else loaded.get_layer(layer.name)
    if type(restored) is not type(layer):
        raise AssertionError(
            f"{where}: the loaded model holds a {type(restored).__name__}."
        )
    if json_of(restored.get_config()) != json_of(layer.get_config()):
        raise AssertionError(
            f"{where}: the loaded layer's config differs:\n"
            f"{json_of(restored.get_config())}\n!=\n{json_of(layer.get_config())}"
        )
    for kind in ("trainable_weights", "non_trainable_weights"):
        saved = getattr(layer, kind)
        back = getattr(restored, kind)
        # Names, not paths: a sublayer passed to the constructor is built
        # outside the layer's name scope when the file is loaded.
        if [w.name for w in back] != [w.name for w in saved]:
            raise AssertionError(
                f"{where}: the loaded layer's {kind} are "
                f"{[w.path for w in back]}; saved {[w.path for w in saved]}."
            )
        for w, a, b in zip(saved, values_of(saved), values_of(back)):
            if a.shape != b.shape or not np.array_equal(a, b):
                raise AssertionError(
                    f"{where}: weight {w.path} differs after a .keras "
                    "round trip."
                )
    actual = loaded(input_data)
    # Flattened: a loaded functional model returns a list where the saved
    # one returned the layer's tuple.
    assert_same(
        [specs(x) for x in tree.flatten(expected)],
        [specs(x) for x in tree.flatten(actual)],
        where,
        "loaded model output",
    )
    for a, e in zip(tree.flatten(actual), tree.flatten(expected)):
        np.testing.assert_allclose(
            ops.convert_to_numpy(a),
            ops.convert_to_numpy(e),
            rtol=tolerance,
            atol=tolerance,
            err_msg=f"{where}: loaded model output",
        )
    mask = first_mask(expected)
    check_mask(
        actual,
        False if mask is None else ops.convert_to_numpy(mask),
        where,
        "loaded model's output",
    )
