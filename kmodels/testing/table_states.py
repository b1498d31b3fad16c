"""Recording a `GrowableEmbedding`'s table and optimizer slots during `fit`,
for step-by-step comparison with the NumPy oracle."""

import keras
import numpy as np


class TableStates(keras.callbacks.Callback):
    """Keeps, after each train batch, the layer's table and trained slots
    as float64 NumPy arrays: `states[batch] == [table, *slots]`.

    Args:
        layer: a `kmodels.layers.GrowableEmbedding` in the trained model.
    """

    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.states = []

    def on_train_batch_end(self, batch, logs=None):
        self.model  # noqa: B018 (JAX: writes the training state back)
        variables = [self.layer.embeddings, *self.layer.trained_slots]
        self.states.append(
            [
                keras.ops.convert_to_numpy(v.value).astype(np.float64)
                for v in variables
            ]
        )
