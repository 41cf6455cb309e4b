"""The smart search's YAML: what to search (``search_space``), under which traffic (``workload``),
for which goal (``goal``) and how (``sweep``).

Every block is a frozen pydantic model that rejects unknown keys, so a typo fails at load with its
field path and line (``search_space.gpu_budget: ... [sweep.yaml:7]``) rather than being ignored.
Searched knobs are lists (one entry pins the knob); a numeric knob may instead be a
``{low, high, log}`` range. Model and system names resolve lazily (``resolve_model``,
``resolve_system``): a config can be checked without the catalog deciding anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BeforeValidator,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from aisimulate.catalog import ModelSpec, System, get_model, get_system
from aisimulate.errors import ConfigError
from aisimulate.replay.plan import SLA, Backend
from aisimulate.spica.knobs import (
    KV_ROUTER_PINS,
    PINNED_LAYOUTS,
    SEARCH_CHOICES,
    Choices,
    CountKnob,
    DeploymentMode,
    FpmSamplings,
    LoadPredictors,
    LoadSensitivities,
    MemoryFraction,
    NonNegativeFloat,
    NonNegativeInt,
    PinnedDisagg,
    PinnedReplicas,
    PositiveFloat,
    PositiveInt,
    RouterMode,
    ScalingPolicies,
    StrictModel,
    UnitInterval,
    UnitKnob,
    WeightKnob,
)
from aisimulate.spica.score import PARETO
from aisimulate.workload.loader import pydantic_message
from aisimulate.yaml_source import read_yaml_mapping

Objective = Literal[
    "throughput",
    "throughput_per_gpu",
    "throughput_per_user",
    "e2e_latency",
    "goodput",
    "goodput_per_gpu",
    "cost_per_million_tokens",
]
Target = Literal[Objective, "pareto"]
# The reference's enum of targets, for code written against it; a member validates as its value.
OptimizationTarget = StrEnum("OptimizationTarget", {name.upper(): name for name in get_args(Target)})
Sampler = Literal["auto", "tpe", "nsgaii", "random"]
PerfProvider = Literal["analytic", "aic", "auto", "polynomial"]

DEFAULT_PARETO_OBJECTIVES: tuple[Objective, ...] = ("throughput_per_gpu", "throughput_per_user")
SLA_OBJECTIVES = frozenset({"goodput", "goodput_per_gpu"})
# What the planner optimises while a candidate replays.
PLANNER_TARGETS: Mapping[str, Literal["throughput", "latency", "sla"]] = MappingProxyType(
    {
        "throughput": "throughput",
        "throughput_per_gpu": "throughput",
        "throughput_per_user": "throughput",
        "cost_per_million_tokens": "throughput",
        "e2e_latency": "latency",
        "goodput": "sla",
        "goodput_per_gpu": "sla",
    }
)


def _invalid(message: str, *loc: str) -> ValidationError:
    """A broken cross-field rule, raised from a model validator under the field's own path (and so
    its YAML line) instead of the enclosing model's."""
    error = PydanticCustomError("rule", "{rule}", {"rule": message})
    return ValidationError.from_exception_data("config", [InitErrorDetails(type=error, loc=loc, input=None)])


_ADMISSION_THRESHOLDS = tuple(name for name in KV_ROUTER_PINS if name.endswith("threshold"))

# Keys the reference sweeper spells differently, accepted as written there (docs/spica/overview.md).
ORIGINAL_KEYS: Mapping[str, str] = MappingProxyType({"aic_nextn": "nextn"})


class SearchSpace(StrictModel, protected_namespaces=()):
    """Pinned scalars and searched lists; the list knobs' menus are in ``SEARCH_CHOICES``."""

    deployment_mode: Choices[DeploymentMode] = SEARCH_CHOICES["deployment_mode"]
    backend: Choices[Backend] = ("vllm",)
    # Empty: enumerate every legal layout. Otherwise the only layouts tried (one mode only).
    parallel_configs: tuple[PinnedReplicas | PinnedDisagg, ...] = ()
    model_name: str = Field(min_length=1)
    hardware_sku: str = Field(min_length=1)
    gpu_budget: PositiveInt = 32
    min_gpu_budget: PositiveInt | None = None
    min_endpoint: PositiveInt | None = None
    context_length: PositiveInt | None = Field(default=None, description="None: the model's max context")
    startup_time: NonNegativeFloat | None = Field(default=None, description="seconds")
    nextn: NonNegativeInt = Field(default=0, le=5, description="speculative (MTP) draft tokens per step")

    prefill_max_num_batched_tokens: CountKnob = SEARCH_CHOICES["prefill_max_num_batched_tokens"]
    prefill_max_num_seqs: CountKnob = SEARCH_CHOICES["prefill_max_num_seqs"]
    prefill_block_size: PositiveInt = 64
    prefill_gpu_memory_utilization: MemoryFraction = 0.9
    prefill_enable_prefix_caching: bool = True
    decode_max_num_batched_tokens: CountKnob = SEARCH_CHOICES["decode_max_num_batched_tokens"]
    decode_max_num_seqs: CountKnob = SEARCH_CHOICES["decode_max_num_seqs"]
    decode_block_size: PositiveInt = 64
    decode_gpu_memory_utilization: MemoryFraction = 0.9
    decode_enable_prefix_caching: bool = False
    agg_max_num_batched_tokens: CountKnob = SEARCH_CHOICES["agg_max_num_batched_tokens"]
    agg_max_num_seqs: CountKnob = SEARCH_CHOICES["agg_max_num_seqs"]
    agg_block_size: PositiveInt = 64
    agg_gpu_memory_utilization: MemoryFraction = 0.9
    agg_enable_prefix_caching: bool = True

    # Host KV offload (G2); 0 blocks disables it.
    num_g2_blocks: NonNegativeInt = 0
    kv_bytes_per_token: PositiveInt | None = None
    bandwidth_g1_to_g2_gbps: NonNegativeFloat | None = None
    bandwidth_g2_to_g1_gbps: NonNegativeFloat | None = None
    offload_batch_size: PositiveInt | None = None

    router_mode: Choices[RouterMode] = SEARCH_CHOICES["router_mode"]
    overlap_score_credit: UnitKnob = SEARCH_CHOICES["overlap_score_credit"]
    prefill_load_scale: WeightKnob = SEARCH_CHOICES["prefill_load_scale"]
    host_cache_hit_weight: WeightKnob = SEARCH_CHOICES["host_cache_hit_weight"]
    disk_cache_hit_weight: WeightKnob = SEARCH_CHOICES["disk_cache_hit_weight"]
    router_temperature: WeightKnob = SEARCH_CHOICES["router_temperature"]
    # Pinned KV-router busy thresholds and admission queue (the replay models them).
    active_decode_blocks_threshold: PositiveFloat | None = None
    active_prefill_tokens_threshold: PositiveFloat | None = None
    active_prefill_tokens_threshold_frac: PositiveFloat | None = None
    no_admission_control: bool = False
    router_queue_threshold: NonNegativeFloat | None = None
    router_queue_policy: Literal["fcfs", "lcfs", "wspt"] = "fcfs"
    kv_event_lag_ms: NonNegativeFloat | None = None
    use_kv_events: bool = True  # false: the router guesses the caches from its own routing
    router_ttl_secs: PositiveFloat = 120.0  # how long such a guess lasts

    planner_scaling_policy: ScalingPolicies = SEARCH_CHOICES["planner_scaling_policy"]
    planner_fpm_sampling: FpmSamplings = SEARCH_CHOICES["planner_fpm_sampling"]
    planner_load_sensitivity: LoadSensitivities = SEARCH_CHOICES["planner_load_sensitivity"]
    load_predictor_candidates: LoadPredictors = SEARCH_CHOICES["load_predictor_candidates"]

    @model_validator(mode="before")
    @classmethod
    def _original_keys(cls, data: Any) -> Any:
        """A config written for the reference sweeper loads unchanged: its names become ours."""
        if not isinstance(data, dict) or not ORIGINAL_KEYS.keys() & data.keys():
            return data
        renamed = dict(data)
        for original, ours in ORIGINAL_KEYS.items():
            if original in renamed:
                if ours in renamed:
                    raise _invalid(f"{original} is the reference's name of {ours}: set one of them", original)
                renamed[ours] = renamed.pop(original)
        return renamed

    @field_validator("parallel_configs", mode="before")
    @classmethod
    def _pins_match_the_mode(cls, value: object, info: ValidationInfo) -> object:
        modes = info.data.get("deployment_mode")
        if modes is None:  # deployment_mode itself is invalid and reported
            return ()
        if value and len(modes) != 1:
            raise ValueError(
                f"pinning parallel_configs needs exactly one mode in deployment_mode, but got {list(modes)}"
            )
        return PINNED_LAYOUTS[modes[0]].validate_python(value)

    @model_validator(mode="after")
    def _consistent(self) -> SearchSpace:
        if self.min_gpu_budget is not None and self.min_gpu_budget > self.gpu_budget:
            raise _invalid(
                "`min_gpu_budget <= gpu_budget` must hold, but got "
                f"(min_gpu_budget={self.min_gpu_budget}, gpu_budget={self.gpu_budget})",
                "min_gpu_budget",
            )
        if "disagg" in self.deployment_mode and self.prefill_block_size != self.decode_block_size:
            raise _invalid(
                "disagg hands KV blocks from prefill to decode, so `prefill_block_size == decode_block_size` "
                f"must hold, but got ({self.prefill_block_size}, {self.decode_block_size})",
                "decode_block_size",
            )
        if self.num_g2_blocks > 0:
            if self.kv_bytes_per_token is None:
                raise _invalid("kv_bytes_per_token is required when num_g2_blocks > 0", "kv_bytes_per_token")
            # Offload moves prefix-cached blocks: agg workers offload, and so do prefill workers.
            for mode, role in (("agg", "agg"), ("disagg", "prefill")):
                if mode in self.deployment_mode and not getattr(self, f"{role}_enable_prefix_caching"):
                    raise _invalid(
                        f"host offload (num_g2_blocks > 0) needs {role}_enable_prefix_caching",
                        f"{role}_enable_prefix_caching",
                    )
        if self.no_admission_control:
            pinned = [name for name in _ADMISSION_THRESHOLDS if getattr(self, name) is not None]
            if pinned:
                raise _invalid(f"no_admission_control: true contradicts {', '.join(pinned)}", pinned[0])
        if not self.use_kv_events and self.kv_event_lag_ms is not None:
            raise _invalid("kv_event_lag_ms delays KV events, but use_kv_events is false", "kv_event_lag_ms")
        return self

    def resolve_model(self, *, where: str | None = None) -> ModelSpec:
        return get_model(self.model_name, where=_field_at("search_space.model_name", where))

    def resolve_system(self, *, where: str | None = None) -> System:
        return get_system(self.hardware_sku, where=_field_at("search_space.hardware_sku", where))


def _field_at(field: str, location: str | None) -> str:
    """A field path, and the file and line it was read from when there is one."""
    return f"{field}, {location}" if location else field


_RATIO: TypeAdapter[float] = TypeAdapter(NonNegativeFloat)


def _load_ratio(value: object) -> float | tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        return _RATIO.validate_python(value)
    if len(value) != 2:
        raise ValueError(f"a ranged kv_load_ratio must be [min, max], but got {list(value)}")
    low, high = (_RATIO.validate_python(v) for v in value)
    if not low < high:
        raise ValueError(f"a ranged kv_load_ratio needs `min < max`, but got [{low}, {high}]")
    return low, high


_LOADS = ("request_rate", "concurrency", "kv_load_ratio")
_SYNTHETIC_ONLY = (
    "isl",
    "osl",
    *_LOADS,
    "num_request_ratio",
    "arrival",
    "shared_prefix_ratio",
    "num_prefix_groups",
    "turns_per_session",
    "inter_turn_delay_ms",
)
_TRACE_ONLY = ("trace_format", "arrival_speedup_ratio", "replay_concurrency")


class Workload(StrictModel):
    """A mooncake trace (``trace_path``), or synthetic requests loaded by exactly one of
    ``request_rate`` (open loop, gaps of 1000/rate ms; ``arrival: poisson`` for random gaps),
    ``concurrency`` (a fixed closed loop) or ``kv_load_ratio`` (a closed loop sized to each
    candidate's KV capacity, so every candidate is loaded alike; may exceed 1)."""

    isl: PositiveInt | None = None
    osl: PositiveInt | None = None
    concurrency: PositiveInt | None = None
    kv_load_ratio: Annotated[float | tuple[float, float] | None, BeforeValidator(_load_ratio)] = None
    request_rate: PositiveFloat | None = None
    arrival: Literal["constant", "poisson"] = "constant"
    num_request_ratio: PositiveFloat | None = Field(default=None, description="requests = ratio x load")
    shared_prefix_ratio: UnitInterval = 0.0
    num_prefix_groups: NonNegativeInt = 0
    turns_per_session: PositiveInt = 1
    inter_turn_delay_ms: NonNegativeFloat = 0.0
    trace_path: Path | None = None
    trace_format: Literal["mooncake"] = "mooncake"
    arrival_speedup_ratio: PositiveFloat = 1.0
    replay_concurrency: PositiveInt | None = Field(default=None, description="closed-loop cap for a trace")

    def _changed(self, names: Sequence[str]) -> list[str]:
        """The given fields set away from their defaults (a default restated is harmless)."""
        fields = type(self).model_fields
        return [n for n in names if n in self.model_fields_set and getattr(self, n) != fields[n].default]

    @model_validator(mode="after")
    def _one_load_shape(self) -> Workload:
        if self.trace_path is not None:
            stray = self._changed(_SYNTHETIC_ONLY)
            if stray:
                raise _invalid(
                    f"a trace workload must not set synthetic fields: {', '.join(stray)}", stray[0]
                )
            return self
        loads = [name for name in _LOADS if getattr(self, name) is not None]
        if len(loads) != 1:
            raise _invalid(
                "a synthetic workload needs exactly one of request_rate, concurrency, or kv_load_ratio, "
                f"but got {loads or 'none'}",
                *loads[-1:],
            )
        missing = [name for name in ("isl", "osl", "num_request_ratio") if getattr(self, name) is None]
        if missing:
            raise _invalid(f"a synthetic workload needs {', '.join(missing)}", missing[0])
        stray = self._changed(_TRACE_ONLY)
        if stray:
            raise _invalid(f"{', '.join(stray)}: for trace workloads only (set trace_path)", stray[0])
        if self.arrival == "poisson" and self.request_rate is None:
            raise _invalid("arrival: poisson needs request_rate (an open-loop workload)", "arrival")
        return self

    @property
    def is_trace(self) -> bool:
        return self.trace_path is not None

    @property
    def kv_load_ratio_range(self) -> tuple[float, float] | None:
        return self.kv_load_ratio if isinstance(self.kv_load_ratio, tuple) else None

    @property
    def arrival_interval_ms(self) -> float | None:
        """Mean gap between synthetic arrivals; None in a closed loop or for a trace."""
        return 1000.0 / self.request_rate if self.request_rate is not None else None

    def max_num_inflight(self, concurrency: int | None = None) -> int | None:
        """The closed-loop cap: a trace's ``replay_concurrency`` always wins; otherwise the
        concurrency a KV load resolved to (``concurrency``), else the fixed one; None: open loop."""
        if self.is_trace:
            return self.replay_concurrency
        return concurrency if concurrency is not None else self.concurrency

    def num_requests(self, concurrency: int | None = None) -> int:
        """Synthetic requests to replay: ``num_request_ratio`` times the load (a resolved
        concurrency, else the fixed concurrency, else the request rate). Python's round (ties to
        even) because the reference sweeper computes it so."""
        if self.num_request_ratio is None:
            raise ValueError("a trace workload replays the requests in its file")
        load = concurrency if concurrency is not None else self.concurrency or self.request_rate
        if load is None:
            raise ValueError("a kv_load_ratio workload needs its resolved concurrency to size the run")
        return max(1, round(self.num_request_ratio * load))


def _sla_is_complete(sla: SLA | None) -> bool:
    """Goodput counts requests that meet the SLA; without e2e, a request is judged by ttft and itl."""
    return sla is not None and (
        sla.e2e_ms is not None or (sla.ttft_ms is not None and sla.itl_ms is not None)
    )


class OptimizationGoal(StrictModel):
    """What "best" means: one objective, or ``pareto`` over ``pareto_objectives``."""

    target: Target = "throughput"
    sla: SLA | None = None
    pareto_objectives: tuple[Objective, ...] | None = None
    price_per_gpu_hour_usd: PositiveFloat | None = Field(
        default=None, description="for cost_per_million_tokens; None: the system's price"
    )

    @model_validator(mode="after")
    def _scorable(self) -> OptimizationGoal:
        if self.pareto_objectives is not None and self.target != PARETO:
            raise _invalid(
                f"pareto_objectives is only valid when target is 'pareto', but got target {self.target!r}",
                "pareto_objectives",
            )
        objectives = self.objectives
        if self.target == PARETO:
            if len(objectives) < 2:
                raise _invalid(
                    f"a Pareto goal needs at least 2 objectives, but got {list(objectives)}",
                    "pareto_objectives",
                )
            repeated = sorted({o for i, o in enumerate(objectives) if o in objectives[:i]})
            if repeated:
                raise _invalid(
                    f"pareto_objectives must be distinct, but {repeated} repeat", "pareto_objectives"
                )
        needing = [o for o in objectives if o in SLA_OBJECTIVES]
        if needing and not _sla_is_complete(self.sla):
            raise _invalid(
                f"objectives {needing} require an SLA target with e2e_ms, or with both ttft_ms and itl_ms",
                "sla",
            )
        return self

    @property
    def objectives(self) -> tuple[str, ...]:
        """The scalar target alone, or the Pareto objectives (the default pair only when unset)."""
        if self.target != PARETO:
            return (self.target,)
        return self.pareto_objectives if self.pareto_objectives is not None else DEFAULT_PARETO_OBJECTIVES

    @property
    def planner_target(self) -> Literal["throughput", "latency", "sla"]:
        """A Pareto goal with a goodput objective plans for the SLA too; otherwise for throughput."""
        if self.target != PARETO:
            return PLANNER_TARGETS[self.target]
        return "sla" if SLA_OBJECTIVES.intersection(self.objectives) else "throughput"


def _find_trace(trace: Path, config_folder: Path) -> Path | str:
    """The trace file a config names, or why there is none (every place looked in)."""
    places = [trace] if trace.is_absolute() else [config_folder / trace, Path.cwd() / trace]
    found = next((place for place in places if place.is_file()), None)
    if found is not None:
        return found
    if trace.is_absolute():
        return f"no such file: {trace}"
    return f"no such file: {trace} (looked for {places[0]} and {places[1]})"


def _cpu_count() -> int:
    return os.cpu_count() or 1


class SweepConfig(StrictModel):
    """How the search runs. What it finds depends on the config and the seed alone: the round size
    is fixed (the reference's 16), the worker count only sets how many run at once (one per CPU
    by default), and the default perf model (analytic) needs nothing installed."""

    max_rounds: PositiveInt = Field(default=20, description="rounds per deployment-mode branch")
    parallel_evals: PositiveInt = Field(default_factory=_cpu_count, description="evaluations at once")
    candidates_per_round: PositiveInt = Field(default=16, description="new samples wanted per round")
    random_seed: NonNegativeInt = 1
    max_eval_seconds: PositiveFloat | None = Field(default=600.0, description="per evaluation; None: no cap")
    sampler: Sampler = Field(default="auto", description="auto: TPE, multi-objective under a Pareto goal")
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    storage: str | None = Field(default=None, description="Optuna storage URL; None: SQLite in output_dir")
    output_dir: Path = Field(default=Path("spica_output"), description="relative to the working directory")
    perf: PerfProvider = "analytic"

    @model_validator(mode="after")
    def _executor_options(self) -> SweepConfig:
        if self.ray_address is not None and self.executor != "ray":
            raise _invalid(
                f"ray_address needs executor: ray, but got executor {self.executor!r}", "ray_address"
            )
        if self.storage is not None and "://" not in self.storage:
            raise _invalid(
                f"storage must be a database URL such as sqlite:///study.db, but got {self.storage!r}",
                "storage",
            )
        return self


class SmartSearchConfig(StrictModel):
    """The whole search: load it with ``from_yaml`` (or ``from_mapping``) to get ConfigErrors."""

    search_space: SearchSpace
    workload: Workload
    goal: OptimizationGoal = OptimizationGoal()
    sweep: SweepConfig = Field(default_factory=SweepConfig)

    @model_validator(mode="before")
    @classmethod
    def _pareto_sweeps_kv_load(cls, data: Any) -> Any:
        """A Pareto goal with no load given traces the whole KV-load axis, [0, 1]."""
        if not isinstance(data, dict) or not isinstance(data.get("workload"), dict):
            return data
        goal, workload = data.get("goal"), data["workload"]
        target = goal.get("target") if isinstance(goal, dict) else getattr(goal, "target", None)
        if target != PARETO or workload.get("trace_path") is not None:
            return data
        if all(workload.get(name) is None for name in _LOADS):
            return {**data, "workload": {**workload, "kv_load_ratio": [0.0, 1.0]}}
        return data

    @model_validator(mode="after")
    def _ranged_load_needs_pareto(self) -> SmartSearchConfig:
        if self.workload.kv_load_ratio_range is not None and self.goal.target != PARETO:
            raise _invalid(
                "a ranged workload.kv_load_ratio is only allowed when goal.target is 'pareto', "
                f"but got target {self.goal.target!r}",
                "workload",
                "kv_load_ratio",
            )
        return self

    def price_per_gpu_hour_usd(self) -> float | None:
        """The price cost objectives charge: the goal's, else the system's; an error when a cost
        objective has neither, because a cost of 0 would make every candidate look free."""
        price = self.goal.price_per_gpu_hour_usd
        if price is None:
            price = self.search_space.resolve_system().price_per_gpu_hour_usd
        if price is None and "cost_per_million_tokens" in self.goal.objectives:
            raise ConfigError(
                f"cost_per_million_tokens needs a price: system {self.search_space.hardware_sku!r} has no "
                "price_per_gpu_hour_usd, so set goal.price_per_gpu_hour_usd",
                where="goal.price_per_gpu_hour_usd",
            )
        return price

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SmartSearchConfig:
        """A config built in code; errors are one-line ConfigErrors that name the field path."""
        return cls._validated(data, lambda path: None)

    @classmethod
    def from_yaml(cls, path: str | Path) -> SmartSearchConfig:
        """Load a YAML file; errors name the file, the field and its line. A relative
        ``workload.trace_path`` is looked up next to the file, then in the working directory (where
        the reference sweeper looks), and must exist in one of them."""
        source = read_yaml_mapping(path, what="a smart-search config")
        path, data, where = source.path, source.data, source.where

        workload = data.get("workload")
        missing = None  # reported once the rest of the config is known to be valid
        if isinstance(workload, dict) and isinstance(workload.get("trace_path"), str):
            trace = Path(workload["trace_path"]).expanduser()
            found = _find_trace(trace, path.resolve().parent)
            if isinstance(found, str):
                missing, found = found, trace
            data["workload"] = {**workload, "trace_path": found}
        config = cls._validated(data, where)
        if missing is not None:
            raise ConfigError(f"workload.trace_path: {missing}", where=where(("workload", "trace_path")))
        # A misspelt model or GPU is named with its line now, not when the search first needs it.
        config.search_space.resolve_model(where=where(("search_space", "model_name")))
        config.search_space.resolve_system(where=where(("search_space", "hardware_sku")))
        return config

    @classmethod
    def _validated(
        cls, data: Mapping[str, Any], where: Callable[[tuple[str | int, ...]], str | None]
    ) -> SmartSearchConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            message = pydantic_message(err)
            field = message.split(":", 1)[0]
            field_path = tuple(int(part) if part.isdigit() else part for part in field.split("."))
            raise ConfigError(message, where=where(field_path)) from None
