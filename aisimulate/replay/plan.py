"""What to simulate: a deployment plan (engines, router) and an SLA, as validated plain data.

Plans are pydantic models: frozen, picklable and JSON-serialisable, so a search can ship them to
another process or machine unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)

from aisimulate.catalog.backends import Backend, backend_profile
from aisimulate.perf.providers import async_scheduling_for
from aisimulate.planner.config import PlannerConfig

__all__ = [
    "SLA",
    "Backend",
    "DeploymentPlan",
    "EngineSpec",
    "KvRouterSpec",
    "LeastLoadedRouterSpec",
    "QueuePolicy",
    "RandomRouterSpec",
    "RoundRobinRouterSpec",
    "RouterSpec",
    "SglangOptions",
    "router_spec",
]


QueuePolicy = Literal["fcfs", "lcfs", "wspt"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SglangOptions(_Frozen):
    schedule_policy: Literal["fifo", "lpm"] = "fifo"
    max_prefill_tokens: int = Field(default=16384, ge=1)
    chunked_prefill_size: int = Field(default=8192, ge=1)
    clip_max_new_tokens: int = Field(default=4096, ge=1)
    schedule_conservativeness: float = Field(default=1.0, gt=0)
    # --scheduler-recv-interval: a scheduler that is decoding takes new requests in only every
    # this many decode passes (after an extend pass or when idle, at once); 1 is SGLang's default.
    scheduler_recv_interval: int = Field(default=1, ge=1)
    # --piecewise-cuda-graph-max-tokens of a release that runs extend passes in a piecewise CUDA
    # graph by default (0.5.10 until mid-2026: its chunked-prefill size): on an MLA model on
    # Blackwell such a pass leaves TRT-LLM's ragged prefill kernel for FlashInfer's paged-MLA
    # path (``replay.sglang_graphs``). 0: no extend pass runs in the graph (later releases for
    # these models).
    piecewise_cuda_graph_max_tokens: int = Field(default=0, ge=0)
    # --moe-a2a-backend: how expert-parallel ranks exchange tokens. "deepep" (with DeepEP's
    # auto mode: low-latency for decode, normal for extend) runs the experts as DeepGEMM grouped
    # GEMMs, priced by AIConfigurator's measurements of that kernel (FP8 DeepSeek experts at the
    # EP sizes measured); "none" (SGLang's default) the backend's default MoE kernel.
    moe_a2a_backend: Literal["none", "deepep"] = "none"


class EngineSpec(_Frozen):
    """One role's workers: parallel shape, replica count and scheduler limits (per DP rank)."""

    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    attention_dp: int = Field(default=1, ge=1)
    moe_tp: int | None = Field(default=None, ge=1)
    moe_ep: int | None = Field(default=None, ge=1)
    # Physical experts per MoE layer when the server replicates hot experts over its expert-parallel
    # ranks (EPLB: TensorRT-LLM's num_slots, SGLang's experts + --ep-num-redundant-experts); each
    # rank holds moe_expert_slots / moe_ep of them. None: one slot per expert.
    moe_expert_slots: int | None = Field(default=None, ge=1)
    replicas: int = Field(default=1, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    max_num_seqs: int = Field(default=256, ge=1)
    block_size: int = Field(default=64, ge=1)
    # The backend's memory fraction as launched; None: the server's own default, raised when that
    # cannot hold the model (aisimulate.perf.memory.estimate_memory).
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    num_gpu_blocks: int | None = Field(default=None, ge=1, description="pin the KV pool per DP rank")
    # Hybrid linear-attention models: recurrent-state slots per DP rank (SGLang's
    # --max-mamba-cache-size); None sizes the state pool from memory.
    max_mamba_cache_size: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    kv_cache_dtype: Literal["auto", "bf16", "fp16", "fp8", "fp4"] = "auto"
    preemption_mode: Literal["lifo", "fifo"] = "lifo"
    # vLLM's --async-scheduling: the CPU work of the next pass overlaps this pass on the GPU, so a
    # pass costs max(kernels, framework overhead) instead of their sum. None: vLLM's default (on).
    async_scheduling: bool | None = None
    # Under asynchronous scheduling, passes (of the pass that computed it) before a request's
    # first token reaches the client; None: the backend's (BackendProfile.async_first_token_lag_passes).
    first_token_lag_passes: float | None = Field(default=None, ge=0)
    # A pass with prompt tokens that runs without CUDA graphs lasts at least this many ms per
    # decoder layer of a pipeline stage (its host launches every kernel); None: the backend's
    # (BackendProfile.eager_layer_ms, or eager_layer_ms_one_gpu on a stage of one GPU: TRT-LLM's
    # passes with prompts), 0: no floor.
    eager_layer_ms: float | None = Field(default=None, ge=0)
    # CUDA-graph batch padding: a pass is priced at the next batch size the backend captures
    # (BackendProfile.cuda_graphs). Off by default: on the development rows it moved TPOT the
    # wrong way where our decode kernels are already slow (docs/fidelity.md).
    cuda_graph_padding: bool = False
    # The largest batch a graph runs (vLLM's max_cudagraph_capture_size, SGLang's
    # --cuda-graph-max-bs, TRT-LLM's cuda_graph_config.max_batch_size); None: the backend's.
    cuda_graph_max_batch_size: int | None = Field(default=None, ge=1)
    startup_time: float | None = Field(default=None, ge=0, description="seconds before a new worker serves")
    sglang: SglangOptions = SglangOptions()
    # Host KV offload (KVBM): G2 host memory and optional G3 disk tier, in blocks per rank; links in
    # GB/s (<= 0: instant). Block bytes = block_size x kv_bytes_per_token (default: the model's KV
    # bytes per token per GPU).
    num_g2_blocks: int | None = Field(default=None, ge=1)
    num_g3_blocks: int | None = Field(default=None, ge=1)
    kv_bytes_per_token: float | None = Field(default=None, gt=0)
    bandwidth_g1_to_g2_gbps: float = 14.0
    bandwidth_g2_to_g1_gbps: float = 14.0
    bandwidth_g2_to_g3_gbps: float = 7.0
    bandwidth_g3_to_g2_gbps: float = 7.0
    offload_batch_size: int = Field(default=32, ge=1)
    # Speculative decoding (MTP/Eagle): drafts per step and P(draft i accepted | earlier ones were);
    # unset: the model's documented acceptance (catalog `mtp_accepted_tokens`), else 0.85, 0.3.
    nextn: int = Field(default=0, ge=0, le=5)
    nextn_accept_rates: list[float] | None = None
    mtp_seed: int = 42

    @field_validator("nextn_accept_rates")
    @classmethod
    def _rates(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and any(not 0 <= x <= 1 for x in value):
            raise ValueError(f"acceptance rates must be in [0, 1], got {value}")
        return value

    @model_validator(mode="after")
    def _tiers(self) -> EngineSpec:
        if self.cuda_graph_max_batch_size is not None and not self.cuda_graph_padding:
            raise ValueError("cuda_graph_max_batch_size needs cuda_graph_padding: true")
        if self.num_g3_blocks is not None and self.num_g2_blocks is None:
            raise ValueError("num_g3_blocks needs num_g2_blocks (G3 sits below G2)")
        if self.num_g2_blocks is not None and not self.enable_prefix_caching:
            raise ValueError("host offload (num_g2_blocks) needs enable_prefix_caching")
        return self

    @property
    def accept_rates(self) -> list[float]:
        """Per-position conditional acceptance, padded with zeros to ``nextn`` (default 0.85, 0.3)."""
        rates = self.nextn_accept_rates if self.nextn_accept_rates is not None else [0.85, 0.3]
        return (list(rates) + [0.0] * self.nextn)[: self.nextn]

    @property
    def mean_tokens_per_step(self) -> float:
        """Expected tokens a decoder emits per step: 1 + P(1st draft) + P(1st and 2nd) + ..."""
        tokens = reach = 1.0
        for rate in self.accept_rates:
            reach *= rate
            tokens += reach
        return tokens

    @property
    def gpus_per_worker(self) -> int:
        return self.tp * self.pp * self.attention_dp


class RoundRobinRouterSpec(_Frozen):
    """Each arrival to the next rank in turn."""

    mode: Literal["round_robin"] = "round_robin"


class RandomRouterSpec(_Frozen):
    """Each arrival to a rank drawn by the replay's seeded generator."""

    mode: Literal["random"] = "random"


class LeastLoadedRouterSpec(_Frozen):
    """Each arrival to the rank with the fewest active KV blocks, then the fewest requests."""

    mode: Literal["least_loaded"] = "least_loaded"


class KvRouterSpec(_Frozen):
    """Dynamo's KV router: cached-prefix credit against load (``replay/kv_router.py``)."""

    mode: Literal["kv_router"] = "kv_router"
    overlap_score_credit: float = Field(default=1.0, ge=0, le=1)
    overlap_score_credit_decay: float = Field(default=0.0, ge=0)
    prefill_load_scale: float = Field(default=1.0, ge=0)
    router_temperature: float = Field(default=0.0, ge=0)
    decode_active_request_weight: float = Field(default=0.0, ge=0)
    router_assume_kv_reuse: bool = True
    router_track_prefill_tokens: bool = True
    router_track_active_blocks: bool = True
    # Busy filters (None: off): a rank over any is skipped unless every rank is.
    active_decode_blocks_threshold: float | None = Field(default=None, gt=0)
    active_prefill_tokens_threshold: float | None = Field(default=None, gt=0)
    active_prefill_tokens_threshold_frac: float | None = Field(default=None, gt=0)
    # Admission control: hold arrivals while every rank has more pending prefill than this many
    # token budgets (None: never hold; 0: hold while every rank has any pending prefill).
    router_queue_threshold: float | None = Field(default=None, ge=0)
    router_queue_policy: QueuePolicy = "fcfs"
    host_cache_hit_weight: float = Field(default=0.75, ge=0)
    disk_cache_hit_weight: float = Field(default=0.25, ge=0)
    # Delay before the router sees the engines' KV Stored/Removed events (None: it sees them
    # at once); lifecycle edges (dispatch, first token, completion) stay immediate.
    kv_event_lag_ms: float | None = Field(default=None, ge=0)
    # Whether the engines publish KV events (Dynamo's use_kv_events). Without them the router
    # guesses: a routed request's prompt blocks count as cached on its rank for router_ttl_secs.
    use_kv_events: bool = True
    router_ttl_secs: float = Field(default=120.0, gt=0)

    @model_validator(mode="after")
    def _events(self) -> KvRouterSpec:
        if not self.use_kv_events and self.kv_event_lag_ms is not None:
            raise ValueError("kv_event_lag_ms delays KV events, but use_kv_events is false")
        return self


def _round_robin_by_default(data: object) -> object:
    """A router mapping without ``mode`` is round-robin, as it was before each mode had a model."""
    if isinstance(data, dict) and "mode" not in data:
        return {**data, "mode": "round_robin"}
    return data


# How a pool picks a worker rank: one settings model per router mode, told apart by ``mode``, so
# a setting the mode does not read is pydantic's unknown-key error, never ignored. Each model is
# built into its router by its entry in ``ROUTERS`` (``replay/router.py``): a new router is its
# model, added here, and that one entry (a test checks that the union and the registry agree).
RouterSpec = Annotated[
    RoundRobinRouterSpec | RandomRouterSpec | LeastLoadedRouterSpec | KvRouterSpec,
    Field(discriminator="mode"),
    BeforeValidator(_round_robin_by_default),
]
_ROUTER_SPEC: TypeAdapter[RouterSpec] = TypeAdapter(RouterSpec)


def router_spec(settings: Mapping[str, Any]) -> RouterSpec:
    """A router as configs write it (``{mode: kv_router, overlap_score_credit: 0.5}``), validated
    into its mode's model."""
    return _ROUTER_SPEC.validate_python(settings)


class DeploymentPlan(_Frozen):
    """A deployment: ``agg`` workers behind one router, or (``mode: disagg``) a ``prefill`` pool
    handing each prompt's KV cache to a ``decode`` pool, each pool with its own router."""

    mode: Literal["agg", "disagg"] = "agg"
    backend: Backend = "vllm"
    model: str
    system: str
    agg: EngineSpec | None = None
    prefill: EngineSpec | None = None
    decode: EngineSpec | None = None
    router: RouterSpec = RoundRobinRouterSpec()
    prefill_router: RouterSpec | None = None
    decode_router: RouterSpec | None = None
    # GB/s per GPU for the prefill -> decode KV transfer; None: the system's link (NVLink when a
    # prefill and a decode worker fit one NVLink domain, else inter-node); 0: free.
    kv_transfer_bandwidth_gbps: float | None = Field(default=None, ge=0)
    # Fixed latency of each prefill -> decode hand-off besides its bytes (request hops, transfer
    # setup; ``replay.transfer``). None: the backend's fitted value, or 0 where the bandwidth is
    # pinned to 0 (free); 0: bytes over bandwidth only.
    kv_transfer_latency_ms: float | None = Field(default=None, ge=0)
    kv_transfer_timing: Literal["full_prompt", "destination_missing"] = "full_prompt"
    # Per request, from the client's send to the engine (HTTP, chat template, tokenisation) and
    # the tokens' way back: counted in TTFT and E2E, not in token gaps. None: the backend's
    # calibrated value (``replay.workers.resolve_frontend_latency_ms``); 0: engine timings only,
    # as the reference replay.
    frontend_latency_ms: float | None = Field(default=None, ge=0)
    # Autoscaling during the replay (None: the fleet stays as the engine specs' replicas).
    planner: PlannerConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_agg(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("mode", "agg") == "agg" and data.get("agg") is None:
            return {**data, "agg": {}}
        return data

    @model_validator(mode="after")
    def _roles(self) -> DeploymentPlan:
        if self.mode == "agg":
            if self.prefill is not None or self.decode is not None:
                raise ValueError("prefill/decode engine specs need mode: disagg")
            return self
        if self.prefill is None or self.decode is None:
            raise ValueError("mode: disagg needs both a prefill and a decode engine spec")
        if self.agg is not None:
            raise ValueError("mode: disagg takes prefill and decode specs, not agg")
        if self.prefill.block_size != self.decode.block_size:
            raise ValueError(
                "`prefill.block_size == decode.block_size` must hold, but got "
                f"({self.prefill.block_size}, {self.decode.block_size})"
            )
        return self

    @model_validator(mode="after")
    def _async_is_vllms(self) -> DeploymentPlan:
        for role, spec, _ in self.pools():
            async_scheduling_for(self.backend, spec.async_scheduling, name=f"{role}.async_scheduling")
        return self

    def async_scheduling(self, spec: EngineSpec) -> bool:
        """Whether ``spec``'s passes overlap their framework overhead (vLLM's default: yes)."""
        return async_scheduling_for(self.backend, spec.async_scheduling)

    def cuda_graph_sizes(self, spec: EngineSpec) -> tuple[int, ...]:
        """The batch sizes ``spec``'s passes are padded to (none without ``cuda_graph_padding``)."""
        if not spec.cuda_graph_padding:
            return ()
        return backend_profile(self.backend).cuda_graphs.capture_sizes(spec.cuda_graph_max_batch_size)

    def pools(self) -> list[tuple[str, EngineSpec, RouterSpec]]:
        """(role, engine spec, router) of each pool, in request order."""
        if self.mode == "agg":
            assert self.agg is not None
            return [("agg", self.agg, self.router)]
        assert self.prefill is not None and self.decode is not None
        return [
            ("prefill", self.prefill, self.prefill_router or self.router),
            ("decode", self.decode, self.decode_router or self.router),
        ]


class SLA(_Frozen):
    """Per-request targets; a request meets the SLA when it meets every target given."""

    ttft_ms: float | None = Field(default=None, gt=0)
    itl_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _something(self) -> SLA:
        if self.ttft_ms is None and self.itl_ms is None and self.e2e_ms is None:
            raise ValueError("an SLA needs at least one of ttft_ms, itl_ms, e2e_ms")
        return self
