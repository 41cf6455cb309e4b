"""Autoscaling during a replay: the planner's decisions, its load forecasters and the choice
among them."""

from aisimulate.planner.config import PlannerConfig
from aisimulate.planner.fpm import ForwardPassMetrics
from aisimulate.planner.policy import Decision, Planner, RoleCapability, RoleState, TrafficWindow
from aisimulate.planner.predictors import PRESETS, PredictorSpec, make_predictor, predictor_spec
from aisimulate.planner.selection import Selection, select_load_predictor, trace_windows, window_loss

__all__ = [
    "PRESETS",
    "Decision",
    "ForwardPassMetrics",
    "Planner",
    "PlannerConfig",
    "PredictorSpec",
    "RoleCapability",
    "RoleState",
    "Selection",
    "TrafficWindow",
    "make_predictor",
    "predictor_spec",
    "select_load_predictor",
    "trace_windows",
    "window_loss",
]
