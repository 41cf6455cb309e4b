"""The planner's settings: the reference planner's config keys, validated up front.

A ``deployment.planner:`` block of a replay YAML is exactly this model. Defaults follow the
reference planner except two, chosen so that a bare block does something useful: the target is
``sla`` (the reference defaults to ``throughput``, under which throughput scaling never runs)
and load scaling is on. ``max_gpu_budget`` defaults to the starting fleet's GPUs rather than a
fixed 8, so a planner added to a bigger deployment does not start by shrinking it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from aisimulate.planner.predictors import Family, PredictorSpec

Target = Literal["throughput", "latency", "load", "sla"]


class PlannerConfig(PredictorSpec):
    enable_load_scaling: bool = True
    enable_throughput_scaling: bool = False
    load_adjustment_interval_seconds: float = Field(default=5.0, gt=0)
    throughput_adjustment_interval_seconds: float = Field(default=180.0, gt=0)
    optimization_target: Target = "sla"
    ttft_ms: float = Field(default=500.0, gt=0)
    itl_ms: float = Field(default=50.0, gt=0)
    max_gpu_budget: int | None = Field(default=None, ge=1)
    min_gpu_budget: int = Field(default=-1, ge=-1)
    min_endpoint: int = Field(default=1, ge=1)
    prefill_min_endpoint: int | None = Field(default=None, ge=1)
    decode_min_endpoint: int | None = Field(default=None, ge=1)
    load_scaling_down_sensitivity: float = Field(default=80.0, ge=0, le=100)
    load_min_observations: int = Field(default=5, ge=1)
    max_num_fpm_samples: int = Field(default=64, ge=2)
    fpm_sample_bucket_size: int = Field(default=16, ge=1)
    # Thresholds of the ``load`` target: queued prompt tokens per prefill engine, and decode KV
    # use in percent.
    prefill_scale_up_queue_tokens: float = Field(default=8192.0, ge=0)
    prefill_scale_down_queue_tokens: float = Field(default=0.0, ge=0)
    decode_scale_up_kv_rate: float = Field(default=90.0, ge=0, le=100)
    decode_scale_down_kv_rate: float = Field(default=50.0, ge=0, le=100)
    load_predictor: Family = "arima"
    max_throughput_scaling_replicas: int = Field(default=8, ge=1)
    # Points per axis of the perf-model grid that seeds the pass-time regressions before the
    # first observation (0: learn from observations only).
    benchmark_granularity: int = Field(default=8, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> PlannerConfig:
        side = math.isqrt(self.fpm_sample_bucket_size)
        if side * side != self.fpm_sample_bucket_size:
            raise ValueError(
                f"fpm_sample_bucket_size must be a perfect square, but got {self.fpm_sample_bucket_size}"
            )
        if self.enable_throughput_scaling and self.optimization_target != "sla":
            raise ValueError(
                "enable_throughput_scaling needs optimization_target: sla "
                f"(got {self.optimization_target!r}): it sizes the fleet to the ttft_ms/itl_ms targets"
            )
        if self.prefill_scale_down_queue_tokens > self.prefill_scale_up_queue_tokens:
            raise ValueError("prefill_scale_down_queue_tokens must not exceed prefill_scale_up_queue_tokens")
        if self.decode_scale_down_kv_rate > self.decode_scale_up_kv_rate:
            raise ValueError("decode_scale_down_kv_rate must not exceed decode_scale_up_kv_rate")
        if self.max_gpu_budget is not None and self.min_gpu_budget > self.max_gpu_budget:
            raise ValueError(
                f"min_gpu_budget ({self.min_gpu_budget}) must not exceed "
                f"max_gpu_budget ({self.max_gpu_budget})"
            )
        return self

    def min_endpoints(self, role: str) -> int:
        """Fewest workers a role keeps (role overrides win over ``min_endpoint``)."""
        own = {"prefill": self.prefill_min_endpoint, "decode": self.decode_min_endpoint}.get(role)
        return own if own is not None else self.min_endpoint

    @property
    def sensitivity(self) -> float:
        return self.load_scaling_down_sensitivity / 100.0

    def predictor(self) -> PredictorSpec:
        """The forecaster part, as the predictors module takes it."""
        return PredictorSpec(**self.fields())
