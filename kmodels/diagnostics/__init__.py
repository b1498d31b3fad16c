"""Checks that catch a model that cannot learn, on every backend."""

from kmodels.diagnostics.gradient_flow import GradientFlowError
from kmodels.diagnostics.gradient_flow import GradientReport
from kmodels.diagnostics.gradient_flow import check_gradient_flow
from kmodels.diagnostics.gradient_flow import gradient_report

__all__ = [
    "GradientFlowError",
    "GradientReport",
    "check_gradient_flow",
    "gradient_report",
]
