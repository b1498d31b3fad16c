"""Saving and loading kmodels models safely, on any backend.

- `save_model`: a failed save leaves the previous file byte-identical.
- `load_model`: a `.keras` saved on one backend resumes training on any
  other (see `portable_compile_config`).

See `docs/reliability.md` (Saving).
"""

from kmodels.saving.atomic import check_built
from kmodels.saving.atomic import save_model
from kmodels.saving.atomic import write_atomically
from kmodels.saving.portable_optimizer import load_model
from kmodels.saving.portable_optimizer import portable_compile_config
from kmodels.saving.saving_model import SavingModel

__all__ = [
    "SavingModel",
    "check_built",
    "load_model",
    "portable_compile_config",
    "save_model",
    "write_atomically",
]
