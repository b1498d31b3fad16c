"""Checks that catch a model that cannot learn, on every backend."""

from kmodels.diagnostics.gradient_flow import GradientFlowError
from kmodels.diagnostics.gradient_flow import GradientReport
from kmodels.diagnostics.gradient_flow import check_gradient_flow
from kmodels.diagnostics.gradient_flow import gradient_report
from kmodels.diagnostics.gradient_monitor import GradientFlowFlag
from kmodels.diagnostics.gradient_monitor import GradientFlowWarning
from kmodels.diagnostics.gradient_monitor import GradientMonitor
from kmodels.diagnostics.gradient_monitor import GradientRecord
from kmodels.diagnostics.gradient_plot import plot_gradient_history

__all__ = [
    "GradientFlowError",
    "GradientFlowFlag",
    "GradientFlowWarning",
    "GradientMonitor",
    "GradientRecord",
    "GradientReport",
    "check_gradient_flow",
    "gradient_report",
    "plot_gradient_history",
]
