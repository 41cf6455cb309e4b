"""Autoscaling during a replay: load forecasters and the choice among them (the planner itself
is still to come)."""

from aisimulate.planner.predictors import PRESETS, PredictorSpec, make_predictor, predictor_spec
from aisimulate.planner.selection import Selection, select_load_predictor, trace_windows, window_loss

__all__ = [
    "PRESETS",
    "PredictorSpec",
    "Selection",
    "make_predictor",
    "predictor_spec",
    "select_load_predictor",
    "trace_windows",
    "window_loss",
]
