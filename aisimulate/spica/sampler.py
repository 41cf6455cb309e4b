"""Optuna behind one branch: define-by-run knobs in, selections and projected layouts out.

One study per deployment-mode branch. A trial samples the backend, the latent parallel features
(projected onto the branch's legal layouts for that backend), the router mode and, only under
``kv_router``, its weights, the planner policy and, only when it scales, its details, then the
engine knobs and a ranged ``kv_load_ratio``. A knob with one choice is injected, never sampled.

Feasibility is an Optuna constraint (``spica_feasible``: 0 feasible, 1 not) rather than a failed
trial state: TPE and NSGA-II ignore failed trials, but rank constraint-violating ones below every
feasible one, so the sampler learns to avoid infeasible regions. An infeasible trial is told the
worst value in each direction, and ``study.best_trial`` skips it.

The sampler is rebuilt before every batch of asks, seeded from ``random_seed``, the branch and the
number of trials so far: the next asks then depend only on the seed and the study's trials, so a
resumed study continues exactly as an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState
from pydantic import BaseModel

from aisimulate.spica.config import OptimizationGoal, Sampler
from aisimulate.spica.knobs import ROUTER_WEIGHTS, SCALING_POLICY_PRESETS, NumericRange, expand
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig
from aisimulate.spica.projection import ParallelSpace, Param, Projection
from aisimulate.spica.score import OBJECTIVE_DIRECTIONS, PARETO
from aisimulate.spica.search_space import Branch

FEASIBLE_CONSTRAINT = "spica_feasible"
PROJECTION_ATTR = "spica_projection"
_PLANNER_DETAILS = ("planner_fpm_sampling", "planner_load_sensitivity")
_ROUTER_MODE = "router_mode"


@dataclass(frozen=True, kw_only=True)
class Suggestion:
    """One asked trial: the chosen knob values and the legal layout its features projected to."""

    trial_number: int
    selection: Mapping[str, Any]
    config: ReplicaConfig | DisaggConfig
    projection: Projection | None  # None: the branch has one layout


def directions(goal: OptimizationGoal) -> list[str]:
    """A scalar goal is told its signed score (always maximised); a Pareto goal its raw values."""
    if goal.target != PARETO:
        return ["maximize"]
    return ["maximize" if OBJECTIVE_DIRECTIONS[o] == "max" else "minimize" for o in goal.objectives]


def make_sampler(kind: Sampler, *, seed: int, population_size: int) -> optuna.samplers.BaseSampler:
    """``auto`` and ``tpe``: multivariate, grouped TPE with a constant liar, so a batch asked
    before any of it is told spreads out instead of repeating itself (TPE is multi-objective too)."""
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "nsgaii":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(2, population_size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)


def derived_seed(seed: int, *parts: object) -> int:
    """A stable 32-bit seed from the run seed and where we are (Python's hash is salted)."""
    text = json.dumps([seed, *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def _label(entry: Any, index: int) -> str | int | float:
    """A composite entry's categorical value: its preset id, or ``custom_<i>`` for a dict entry."""
    return f"custom_{index}" if isinstance(entry, BaseModel) else entry


def _suggest_knob(trial: Trial, name: str, knob: tuple[Any, ...] | NumericRange) -> Any:
    if isinstance(knob, NumericRange):
        if isinstance(knob.low, int) and isinstance(knob.high, int):
            return trial.suggest_int(name, knob.low, knob.high, log=knob.log)
        return trial.suggest_float(name, float(knob.low), float(knob.high), log=knob.log)
    if len(knob) == 1:
        return knob[0]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in knob):
        # An ordered menu keeps its order: the optimizer sees the index of the sorted values.
        ordered = sorted(knob)
        return ordered[trial.suggest_int(f"{name}_index", 0, len(ordered) - 1)]
    labels = [_label(v, i) for i, v in enumerate(knob)]
    return knob[labels.index(trial.suggest_categorical(name, labels))]


def _suggest_feature(trial: Trial, param: Param) -> float | str:
    if param.kind == "float":
        return trial.suggest_float(param.name, float(param.domain[0]), float(param.domain[1]))
    if param.kind == "discrete":
        # GPUs per engine are powers of two: an integer exponent keeps their order and scale.
        low, high = (round(math.log2(float(v))) for v in (param.domain[0], param.domain[-1]))
        return float(2 ** trial.suggest_int(f"{param.name}_log2", low, high))
    return trial.suggest_categorical(param.name, list(param.domain))


class BranchSampler:
    """Asks and tells one branch's study; trial handles never leave this object."""

    def __init__(
        self, study: optuna.Study, branch: Branch, *, kind: Sampler, seed: int, batch_size: int
    ) -> None:
        self.study = study
        self.branch = branch
        self._kind = kind
        self._seed = seed
        self._batch_size = batch_size
        self._space = ParallelSpace(branch.pool, branch.gpu_budget) if len(branch.pool) > 1 else None
        self._trials: dict[int, Trial] = {}

    def ask(self, count: int, *, explore: bool = False) -> list[Suggestion]:
        """``count`` new trials; ``explore`` samples them uniformly at random instead."""
        self.study.sampler = make_sampler(
            "random" if explore else self._kind,
            seed=derived_seed(
                self._seed, self.branch.deployment_mode, len(self.study.get_trials(deepcopy=False))
            ),
            population_size=self._batch_size,
        )
        return [self._suggest(self.study.ask()) for _ in range(count)]

    def _suggest(self, trial: Trial) -> Suggestion:
        knobs = self.branch.knobs
        selection: dict[str, Any] = {"deployment_mode": self.branch.deployment_mode}
        selection["backend"] = _suggest_knob(trial, "backend", knobs["backend"])
        projection = None
        if self._space is None:
            config = self.branch.pool[0].config
        else:
            requested = {p.name: _suggest_feature(trial, p) for p in self._space.searchable}
            projection = self._space.project(requested, selection["backend"])
            config = projection.config
            trial.set_user_attr(PROJECTION_ATTR, json.loads(json.dumps(projection.metadata())))
        for name, knob in knobs.items():
            if name in selection or name in _PLANNER_DETAILS:
                continue
            if name in ROUTER_WEIGHTS and selection.get(_ROUTER_MODE) != "kv_router":
                continue
            selection[name] = _suggest_knob(trial, name, knob)
            if name == "planner_scaling_policy" and expand(selection[name], SCALING_POLICY_PRESETS).enabled:
                for detail in _PLANNER_DETAILS:
                    selection[detail] = _suggest_knob(trial, detail, knobs[detail])
        self._trials[trial.number] = trial
        return Suggestion(
            trial_number=trial.number, selection=selection, config=config, projection=projection
        )

    def set_user_attr(self, trial_number: int, key: str, value: Any) -> None:
        self._trials[trial_number].set_user_attr(key, value)

    def tell(self, trial_number: int, values: Sequence[float]) -> None:
        trial = self._trials.pop(trial_number)
        trial.set_constraint(FEASIBLE_CONSTRAINT, 0.0)
        self.study.tell(trial, list(values))

    def tell_infeasible(self, trial_number: int, reason: str) -> None:
        trial = self._trials.pop(trial_number)
        trial.set_user_attr("spica_reason", reason)
        trial.set_constraint(FEASIBLE_CONSTRAINT, 1.0)
        worst = [-math.inf if d == "maximize" else math.inf for d in _direction_names(self.study)]
        self.study.tell(trial, worst)

    def running(self) -> list[FrozenTrial]:
        """Trials asked but never told (a killed run); they become tellable again here."""
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        for frozen in running:
            # The storage's id of the trial: the public Trial needs it to be rebuilt.
            self._trials[frozen.number] = Trial(self.study, frozen._trial_id)
        return sorted(running, key=lambda t: t.number)


def _direction_names(study: optuna.Study) -> list[str]:
    return ["maximize" if d == optuna.study.StudyDirection.MAXIMIZE else "minimize" for d in study.directions]
