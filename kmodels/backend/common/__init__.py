"""Backend-independent helpers of the per-backend modules.

Only the modules of `kmodels/backend/` import these; nothing here imports a
backend at import time.
"""
