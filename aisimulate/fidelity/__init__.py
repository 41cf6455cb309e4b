"""How close replays come to measured serving benchmarks: rows, their replays, and the errors."""

from aisimulate.fidelity.cases import ReplayCase, Skipped, build_case
from aisimulate.fidelity.measured import MeasuredRow, read_measured
from aisimulate.fidelity.predict import Prediction, predict
from aisimulate.fidelity.stats import ErrorStats, error_stats, signed_error_pct

__all__ = [
    "ErrorStats",
    "MeasuredRow",
    "Prediction",
    "ReplayCase",
    "Skipped",
    "build_case",
    "error_stats",
    "predict",
    "read_measured",
    "signed_error_pct",
]
