"""Backend-independent helpers of the per-backend modules.

The modules of `kmodels/backend/{tensorflow,jax,torch}/` may import these;
nothing here imports a backend.
"""
