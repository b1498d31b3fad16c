"""torch side of `kmodels.backend.compiled`: Keras' `Model.export` cannot
write the `Translator` here."""


def model_export_refusal(owner):
    return (
        f"{owner} (Keras' Model.export) is not supported on the torch "
        "backend: no format round-trips this model with this project's "
        "packages (tf_saved_model needs torch_xla, litert needs "
        "litert-torch, onnx cannot export aten::take_along_dim, and the "
        "torch format's program refuses other shapes than its sample "
        "inputs). To serve a model trained on torch, use "
        "TextTranslator.export (strings in and out, written as a "
        "TensorFlow SavedModel by a TensorFlow subprocess from any "
        "backend), or load its .keras file under KERAS_BACKEND=tensorflow "
        "(or jax) and call export there. See docs/export.md."
    )
