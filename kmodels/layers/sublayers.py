"""What a kmodels layer built from sublayers does at the end of `build`."""


def finish_build(layer):
    """Marks `layer` built after its `build` built its sublayers, and
    passes a `trainable=False` that came from a config on to them.

    `trainable=False` from `from_config` reaches only the layer's own flag;
    Keras' setter is what passes it on to the sublayers (and their
    variables). It is set to True first because on TensorFlow, assigning an
    attribute its current value is a no-op.
    """
    if not layer.trainable:
        layer.trainable = True
        layer.trainable = False
    layer.built = True
