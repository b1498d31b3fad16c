"""Input contracts: the same bad input gives the same clear error on every
backend, in eager calls and in compiled `fit` / `evaluate` / `predict`, and
a refused call changes nothing. See `docs/reliability.md`.
"""

from kmodels.contracts.checks import check_ids
from kmodels.contracts.checks import check_layer
from kmodels.contracts.checks import checked
from kmodels.contracts.checks import inputs_checked
from kmodels.contracts.hook import ContractModel
from kmodels.contracts.hook import enforce

__all__ = [
    "ContractModel",
    "check_ids",
    "check_layer",
    "checked",
    "enforce",
    "inputs_checked",
]
