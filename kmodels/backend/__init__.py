"""Backend-specific code, one small module per concern.

Model code never imports TensorFlow, JAX or torch; where a backend needs its own
path, the shared code calls one function here that dispatches on
`keras.backend.backend()`.
"""
