"""Backend-independent helpers of the per-backend modules.

The modules of `kmodels/backend/{tensorflow,jax,torch}/` may import these;
nothing here imports a backend at import time. `saved_model` imports
TensorFlow in its subprocess entry point only (`python -m
kmodels.backend.common.saved_model`, run by `TextTranslator.export` with
`KERAS_BACKEND=tensorflow`).
"""
