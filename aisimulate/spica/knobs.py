"""What a search-space knob may hold: menus, composite presets, numeric ranges, pinned layouts.

A searched knob is a list; one entry pins it. A numeric knob may instead be a ``{low, high, log}``
range, and its list entries are any in-range values (the reference's menus are the defaults).
A composite knob's entry is a preset id or a self-contained dict of the fields the preset expands
to; a dict replaces the preset entirely (no merging). Dicts are validated by the same models the
presets are built from, so a hand-written entry cannot hold a value no preset could (an interval
of 0, a bucket size the planner cannot use, an unknown forecaster family).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Generic, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    model_validator,
)

from aisimulate.planner.predictors import PRESETS as LOAD_PREDICTOR_PRESETS
from aisimulate.planner.predictors import PredictorSpec as LoadPredictor
from aisimulate.replay.plan import Backend
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
N = TypeVar("N", bound=float)


def _not_bool(value: object) -> object:
    # pydantic's lax mode reads `true` as 1; a YAML boolean is never a count.
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, not a boolean ({value})")
    return value


Integer = Annotated[int, BeforeValidator(_not_bool)]
PositiveInt = Annotated[Integer, Field(ge=1)]
NonNegativeInt = Annotated[Integer, Field(ge=0)]
# Knob entries are checked by standalone adapters, which do not see StrictModel's allow_inf_nan.
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
UnitInterval = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
MemoryFraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]

DeploymentMode = Literal["disagg", "agg"]
RouterMode = Literal["kv_router", "round_robin"]


class StrictModel(BaseModel):
    """Frozen, closed to unknown keys and to inf/nan, so a typo or a runaway value fails at load
    rather than hours into a search."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _unique_choices(values: tuple[T, ...]) -> tuple[T, ...]:
    if not values:
        raise ValueError("must list at least one choice")
    return tuple(v for i, v in enumerate(values) if v not in values[:i])  # dicts are unhashable


Choices = Annotated[tuple[T, ...], AfterValidator(_unique_choices)]


class NumericRange(StrictModel, Generic[N]):
    """A searched interval, sampled on a log scale when ``log`` (Optuna's int/float distributions)."""

    low: N
    high: N
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> NumericRange[N]:
        if self.low > self.high:
            raise ValueError(f"`low <= high` must hold, but got (low={self.low}, high={self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs `low > 0`, but got low={self.low}")
        return self


def _numeric_knob(entry: Any) -> BeforeValidator:
    """A non-empty list of values, or a ``{low, high, log}`` range of them. The shape picks the
    branch before the union sees the value: a plain union would try both and report the wrong
    branch's complaint ("should be a valid tuple" for a bad range)."""
    span, choices = TypeAdapter(NumericRange[entry]), TypeAdapter(Choices[entry])  # type: ignore[valid-type]

    def validate(value: object) -> object:
        if isinstance(value, NumericRange):
            value = value.model_dump()
        return span.validate_python(value) if isinstance(value, dict) else choices.validate_python(value)

    return BeforeValidator(validate)


CountKnob = Annotated[tuple[PositiveInt, ...] | NumericRange[PositiveInt], _numeric_knob(PositiveInt)]
WeightKnob = Annotated[
    tuple[NonNegativeFloat, ...] | NumericRange[NonNegativeFloat], _numeric_knob(NonNegativeFloat)
]
UnitKnob = Annotated[tuple[UnitInterval, ...] | NumericRange[UnitInterval], _numeric_knob(UnitInterval)]


class PinnedReplicas(StrictModel):
    """One role's pinned layout. ``pp`` stays 1: the search enumerates no pipeline parallelism."""

    tp: PositiveInt
    attention_dp: PositiveInt = 1
    moe_tp: PositiveInt = 1
    moe_ep: PositiveInt = 1
    pp: Literal[1] = 1
    replicas: PositiveInt = 1

    @property
    def config(self) -> ReplicaConfig:
        shape = WorkerShape(
            tp=self.tp, attention_dp=self.attention_dp, moe_tp=self.moe_tp, moe_ep=self.moe_ep
        )
        return ReplicaConfig(shape, self.replicas)


class PinnedDisagg(StrictModel):
    prefill: PinnedReplicas
    decode: PinnedReplicas

    @property
    def config(self) -> DisaggConfig:
        return DisaggConfig(self.prefill.config, self.decode.config)


# parallel_configs entries by deployment mode.
PINNED_LAYOUTS: Mapping[str, TypeAdapter[Any]] = MappingProxyType(
    {"agg": TypeAdapter(tuple[PinnedReplicas, ...]), "disagg": TypeAdapter(tuple[PinnedDisagg, ...])}
)


class ScalingPolicy(StrictModel):
    """Which planner scaling runs and how often (seconds). All four keys are required in a dict:
    a half-specified policy would silently take intervals nobody chose."""

    enable_throughput_scaling: bool
    enable_load_scaling: bool
    throughput_adjustment_interval_seconds: PositiveInt | None
    load_adjustment_interval_seconds: PositiveInt | None

    @model_validator(mode="after")
    def _enabled_needs_interval(self) -> ScalingPolicy:
        for kind in ("throughput", "load"):
            interval = f"{kind}_adjustment_interval_seconds"
            if getattr(self, f"enable_{kind}_scaling") and getattr(self, interval) is None:
                raise ValueError(f"enable_{kind}_scaling needs {interval}")
        return self

    @property
    def enabled(self) -> bool:
        return self.enable_throughput_scaling or self.enable_load_scaling


class FpmSampling(StrictModel):
    """How many forward-pass samples the planner keeps for its regressions, and their bucketing."""

    max_num_fpm_samples: PositiveInt
    fpm_sample_bucket_size: PositiveInt

    @model_validator(mode="after")
    def _square_buckets(self) -> FpmSampling:
        # The planner lays buckets out on a square grid (batch size x context length).
        size = self.fpm_sample_bucket_size
        if math.isqrt(size) ** 2 != size:
            raise ValueError(f"fpm_sample_bucket_size must be a perfect square, but got {size}")
        return self


class LoadSensitivity(StrictModel):
    """How readily load-based scaling removes a replica."""

    load_scaling_down_sensitivity: Integer = Field(ge=0, le=100)
    load_min_observations: PositiveInt


def _scaling(throughput: bool, load: bool, throughput_s: int | None, load_s: int | None) -> ScalingPolicy:
    return ScalingPolicy(
        enable_throughput_scaling=throughput,
        enable_load_scaling=load,
        throughput_adjustment_interval_seconds=throughput_s,
        load_adjustment_interval_seconds=load_s,
    )


SCALING_POLICY_PRESETS: Mapping[str, ScalingPolicy] = MappingProxyType(
    {
        "disabled": _scaling(False, False, None, None),
        "throughput_180_5": _scaling(True, False, 180, 5),
        "throughput_600_5": _scaling(True, False, 600, 5),
        "load_180_5": _scaling(False, True, 180, 5),
        "load_180_10": _scaling(False, True, 180, 10),
        "hybrid_180_5": _scaling(True, True, 180, 5),
        "hybrid_600_5": _scaling(True, True, 600, 5),
    }
)

FPM_SAMPLING_PRESETS: Mapping[str, FpmSampling] = MappingProxyType(
    {
        name: FpmSampling(max_num_fpm_samples=samples, fpm_sample_bucket_size=bucket)
        for name, (samples, bucket) in {
            "small": (32, 4),
            "default": (64, 16),
            "large": (128, 16),
            "fine": (128, 64),
        }.items()
    }
)

LOAD_SENSITIVITY_PRESETS: Mapping[str, LoadSensitivity] = MappingProxyType(
    {
        name: LoadSensitivity(load_scaling_down_sensitivity=sensitivity, load_min_observations=observations)
        for name, (sensitivity, observations) in {
            "aggressive": (70, 3),
            "default": (80, 5),
            "conservative": (90, 8),
        }.items()
    }
)


def expand(entry: str | M, presets: Mapping[str, M]) -> M:
    """The fields a composite entry stands for: its preset's, or the dict entry itself."""
    return presets[entry] if isinstance(entry, str) else entry


def _composite(presets: Mapping[str, M]) -> BeforeValidator:
    """A preset id, or a dict validated as the model the presets are made of."""
    model = type(next(iter(presets.values())))

    def validate(value: object) -> str | M:
        if not isinstance(value, str):
            return model.model_validate(value)
        if value not in presets:
            raise ValueError(f"unknown preset {value!r}; expected a dict or one of {', '.join(presets)}")
        return value

    return BeforeValidator(validate)


ScalingPolicies = Choices[Annotated[str | ScalingPolicy, _composite(SCALING_POLICY_PRESETS)]]
FpmSamplings = Choices[Annotated[str | FpmSampling, _composite(FPM_SAMPLING_PRESETS)]]
LoadSensitivities = Choices[Annotated[str | LoadSensitivity, _composite(LOAD_SENSITIVITY_PRESETS)]]
LoadPredictors = Choices[Annotated[str | LoadPredictor, _composite(LOAD_PREDICTOR_PRESETS)]]

# Field groups of the search space, named once for the modules that gate, unroll and deploy them.
ROUTER_WEIGHTS = (
    "overlap_score_credit",
    "prefill_load_scale",
    "host_cache_hit_weight",
    "disk_cache_hit_weight",
    "router_temperature",
)
TIER_WEIGHTS = ("host_cache_hit_weight", "disk_cache_hit_weight")  # read only with host offload
KV_ROUTER_PINS = (  # pinned, never searched: busy filters, admission queue, KV events
    "active_decode_blocks_threshold",
    "active_prefill_tokens_threshold",
    "active_prefill_tokens_threshold_frac",
    "no_admission_control",
    "router_queue_threshold",
    "router_queue_policy",
    "kv_event_lag_ms",
    "use_kv_events",
    "router_ttl_secs",
)
OFFLOAD_FIELDS = (
    "num_g2_blocks",
    "kv_bytes_per_token",
    "bandwidth_g1_to_g2_gbps",
    "bandwidth_g2_to_g1_gbps",
    "offload_batch_size",
)

# The reference's menus, in its order: the allowed entries of the categorical and composite
# knobs, and the default entries of the numeric ones.
SEARCH_CHOICES: Mapping[str, tuple[Any, ...]] = MappingProxyType(
    {
        "deployment_mode": get_args(DeploymentMode),
        "backend": get_args(Backend),
        "prefill_max_num_batched_tokens": (8192, 16384, 32768),
        "prefill_max_num_seqs": (1, 2, 4, 8, 16, 32, 64, 128, 256),
        "decode_max_num_batched_tokens": (8192,),
        "decode_max_num_seqs": (256, 512, 1024),
        "agg_max_num_batched_tokens": (8192, 16384, 32768),
        "agg_max_num_seqs": (256, 512, 1024),
        "router_mode": get_args(RouterMode),
        "overlap_score_credit": (0.0, 0.5, 1.0),
        "prefill_load_scale": (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
        "host_cache_hit_weight": (0.5, 0.75, 1.0),
        "disk_cache_hit_weight": (0.0, 0.25, 0.5),
        "router_temperature": (0.0, 0.2, 0.5, 1.0),
        "planner_scaling_policy": tuple(SCALING_POLICY_PRESETS),
        "planner_fpm_sampling": tuple(FPM_SAMPLING_PRESETS),
        "planner_load_sensitivity": tuple(LOAD_SENSITIVITY_PRESETS),
        "load_predictor_candidates": tuple(LOAD_PREDICTOR_PRESETS),
    }
)
