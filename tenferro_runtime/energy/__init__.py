"""Energy: meters (meters.py), accounting (`EnergyMonitor`, `measure`, `process_region`),
budgets (`energy_budget`), the records they fill and reports. DESIGN.md section 8."""

from __future__ import annotations

from .accounting import EnergyMonitor, measure, process_region
from .budget import EnergyBudget, InvalidBudgetError, StepEnergy, check_budgets, energy_budget
from .records import DeviceEnergy, OpEnergy, Region

__all__ = [
    "DeviceEnergy", "EnergyBudget", "EnergyMonitor", "InvalidBudgetError", "OpEnergy", "Region",
    "StepEnergy", "check_budgets", "energy_budget", "measure", "process_region",
]
