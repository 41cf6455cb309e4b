"""Memory of one GPU in a parallel shape: weights, activations, runtime, and what is left for KV.

The budget rule follows each backend: vLLM gives the KV cache
``capacity * gpu_memory_utilization - non_kv``; SGLang ``(capacity - NCCL buffers) *
mem_fraction_static - weights`` (activations and CUDA graphs live outside the fraction); TRT-LLM
``(capacity - non_kv) * free_gpu_memory_fraction``. Without a fraction, each server's own default
applies (SGLang computes its from the GPU and the worker's shape), raised to what deployments set
at most when the default cannot hold the model (see :func:`estimate_memory`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from aisimulate.catalog.backends import BACKENDS, Backend, BackendProfile, backend_profile
from aisimulate.catalog.dtypes import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM
from aisimulate.catalog.models import ModelSpec
from aisimulate.catalog.systems import System
from aisimulate.errors import ConfigError
from aisimulate.perf.shape import ParallelShape, check_shape, kv_heads_per_rank

__all__ = ["BACKENDS", "Backend"]  # the registry's, re-exported for this layer's callers

# Bytes of live activations per scheduled token, in units of the hidden size and the widest
# per-GPU intermediate (gate+up output, then the activated half), at 2 bytes per element.
_ACT_HIDDEN_FACTOR = 4
_ACT_INTER_FACTOR = 2
_LOGIT_BYTES = 4  # fp32 logits for sampling, one row per running sequence
# The highest memory fraction deployments set: published SGLang and TRT-LLM recipes of large MoE
# models on few GPUs go up to 0.95 (the rest holds activations, CUDA graphs and the allocator's
# slack). A plan that leaves the fraction to the server is run at it when the server's default
# cannot hold the model: such a deployment runs, with the fraction raised by whoever launched it.
MAX_MEMORY_FRACTION = 0.95
# SGLang 0.5 ServerArgs._handle_gpu_memory_settings: by GPU memory (MiB, upper bound), the
# default chunked_prefill_size and cuda_graph_max_bs (for tp_size < 4, for tp_size >= 4).
_SGLANG_GPU_DEFAULTS: tuple[tuple[float, int, int, int], ...] = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 2048, 24, 80),
    (60 * 1024, 4096, 32, 160),
    (160 * 1024, 8192, 256, 512),
    (math.inf, 16384, 512, 512),
)
# SGLang's --mamba-full-memory-ratio default: state pool : KV pool = 0.9 of what is left.
SGLANG_STATE_TO_KV_RATIO = 0.9
# SGLang state slots one running request of a hybrid model holds: its own, plus (MambaRadixCache,
# the prefix cache of hybrid models, "no_buffer") the snapshots it keeps for reuse.
SGLANG_STATE_SLOTS_PER_REQUEST = {False: 1, True: 3}


def check_backend(backend: str) -> str:
    return backend_profile(backend).name


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Per-GPU memory of one rank; the worst pipeline stage when pp > 1."""

    model: str
    system: str
    backend: str
    shape: str
    kv_cache_dtype: str
    feasible: bool
    reason: str | None
    # The fraction the budget was taken with (gpu_memory_utilization, mem_fraction_static or
    # free_gpu_memory_fraction), and whether it is MAX_MEMORY_FRACTION because the server's
    # default could not hold the model.
    memory_fraction: float
    memory_fraction_raised: bool
    capacity_bytes: int
    weights_bytes_per_gpu: float
    activation_bytes_per_gpu: float
    runtime_overhead_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    sliding_kv_bytes_per_gpu: float
    # Hybrid linear attention: one running request's recurrent state, and how many requests the
    # state pool lets run at once (0: the model keeps no recurrent state).
    state_bytes_per_request_per_gpu: float
    max_running_requests: int
    kv_tokens_per_rank: int
    num_gpu_blocks: int
    block_size: int
    max_model_len: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def weights_bytes_per_gpu(model: ModelSpec, shape: ParallelShape, *, nextn: int = 0) -> float:
    """Weight bytes on the most loaded GPU (pipeline stages hold whole layers)."""
    p = model.params
    tp = shape.tp
    moe_tp, moe_ep = shape.expert_split
    dense_bytes = WEIGHT_BYTES_PER_PARAM[model.linear_dtype(expert=False)]
    expert_bytes = WEIGHT_BYTES_PER_PARAM[model.linear_dtype(expert=True)]
    base_bytes = WEIGHT_BYTES_PER_PARAM[model.base_dtype]

    attention_bytes = WEIGHT_BYTES_PER_PARAM[model.linear_dtype(expert=False, attention=True)]
    attention = attention_params_per_rank(model, tp) * attention_bytes
    if model.is_moe:
        experts = model.num_experts / moe_ep * p.expert_per_expert / moe_tp
        moe_layer = experts * expert_bytes + p.shared_expert_per_layer / tp * dense_bytes
        moe_layer += p.router_per_layer * base_bytes
    else:
        moe_layer = 0.0
    dense_layer = p.dense_mlp_per_layer / tp * dense_bytes

    layers_per_stage = math.ceil(model.num_layers / shape.pp)
    # The worst stage: dense layers come first, so a stage of MoE layers is the heavy one.
    num_moe = min(layers_per_stage, model.num_moe_layers)
    per_stage = (
        layers_per_stage * attention + num_moe * moe_layer + (layers_per_stage - num_moe) * dense_layer
    )
    embedding = p.embedding / tp * base_bytes
    lm_head = p.lm_head / tp * base_bytes
    mtp = 0.0
    if nextn > 0:
        modules = max(model.num_nextn_layers, 1)
        mtp = modules * (
            attention
            + (moe_layer if model.is_moe else dense_layer)
            + 2 * model.hidden_size**2 / tp * base_bytes
        )
    if shape.pp == 1:
        return per_stage + embedding + lm_head + mtp
    return per_stage + max(embedding, lm_head + mtp)


def attention_params_per_rank(model: ModelSpec, tp: int) -> float:
    """Attention weights of one layer on one GPU; with linear-attention layers, the mean over
    the layers (a Gated DeltaNet mixer's projections are split by tp like attention heads)."""
    if model.is_hybrid_linear:
        full = model.num_layers - model.num_linear_attention_layers
        linear = model.num_linear_attention_layers * model.params.linear_attention_per_layer / tp
        return (full * _full_attention_params_per_rank(model, tp) + linear) / model.num_layers
    return _full_attention_params_per_rank(model, tp)


def _full_attention_params_per_rank(model: ModelSpec, tp: int) -> float:
    h = model.hidden_size
    if model.is_mla:
        # Low-rank down-projections are replicated; the up-projections and output are split.
        replicated = h * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
        return replicated + (model.params.attention_per_layer - replicated) / tp
    q_and_o = 2 * h * model.num_heads * model.head_dim / tp
    kv = 2 * h * kv_heads_per_rank(model, tp) * model.head_dim
    return q_and_o + kv


def kv_bytes_per_token_per_gpu(model: ModelSpec, shape: ParallelShape, kv_dtype: str) -> float:
    """KV bytes one token takes on one GPU: MLA latents are not split by tp, GQA heads are; a
    sparse-attention (DSA) model adds its indexer's key, kept whole on every GPU like the latent."""
    per_element = KV_BYTES_PER_ELEMENT[kv_dtype]
    layers = math.ceil(model.num_full_attention_layers / shape.pp)
    if model.is_mla:
        latent = model.kv_bytes_per_token_per_layer(kv_dtype)
        return layers * (latent + indexer_key_bytes_per_token_layer(model))
    return layers * 2 * kv_heads_per_rank(model, shape.tp) * model.head_dim * per_element


def indexer_key_bytes_per_token_layer(model: ModelSpec) -> float:
    """One layer's indexer key per token (0 without sparse attention)."""
    if not model.is_sparse_attention:
        return 0.0
    return model.indexer_key_bytes_per_token / model.num_full_attention_layers


def state_bytes_per_request_per_gpu(model: ModelSpec, shape: ParallelShape) -> float:
    """One request's recurrent state on the most loaded GPU: linear-attention heads split by tp,
    layers by pipeline stage."""
    if not model.is_hybrid_linear:
        return 0.0
    layers = model.num_linear_attention_layers
    return model.linear_state_bytes_per_request() * math.ceil(layers / shape.pp) / layers / shape.tp


def split_state_pool(
    budget_bytes: float,
    state_bytes: float,
    *,
    backend: str,
    max_num_seqs: int,
    prefix_caching: bool,
    state_slots: int | None = None,
) -> tuple[int, float]:
    """(requests the state pool lets run at once, bytes it takes) out of the KV budget.

    SGLang gives the state pool ``ratio / (1 + ratio)`` of the budget (``--mamba-full-memory-ratio``,
    0.9) and a running request holds one slot, three with its prefix cache on; vLLM and TRT-LLM
    are taken to hold states for ``max_num_seqs`` requests (TRT-LLM allocates them up front; vLLM
    pages states and KV from one pool, which this bounds from above). ``state_slots`` pins the
    pool (SGLang's ``--max-mamba-cache-size``).
    """
    per_request = SGLANG_STATE_SLOTS_PER_REQUEST[prefix_caching] if backend == "sglang" else 1
    if state_slots is not None:
        return min(max_num_seqs, state_slots // per_request), state_slots * state_bytes
    if backend == "sglang":
        pool = budget_bytes * SGLANG_STATE_TO_KV_RATIO / (1 + SGLANG_STATE_TO_KV_RATIO)
        slots = int(max(pool, 0.0) // state_bytes)
        running = min(max_num_seqs, slots // per_request)
        return running, slots * state_bytes
    return max_num_seqs, max_num_seqs * state_bytes


def activation_bytes_per_gpu(
    model: ModelSpec, shape: ParallelShape, *, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """Peak activations of the largest pass the scheduler allows, plus sampling logits."""
    moe_tp, _ = shape.expert_split
    widest = model.intermediate_size / shape.tp
    if model.is_moe:
        # Routed tokens are duplicated top-k times before the expert GEMMs.
        widest = max(widest, model.experts_per_token * model.moe_intermediate_size / moe_tp)
    per_token = 2 * (_ACT_HIDDEN_FACTOR * model.hidden_size + _ACT_INTER_FACTOR * widest)
    logits = max_num_seqs * model.vocab_size / shape.tp * _LOGIT_BYTES
    return max_num_batched_tokens * per_token + logits


def sglang_default_memory_fraction(
    gpu_memory_mib: float, *, tp_size: int, pp_size: int = 1, dp_size: int = 1, speculative: bool = False
) -> float:
    """SGLang 0.5's ``mem_fraction_static`` when none is given (``ServerArgs.
    _handle_gpu_memory_settings``): what is left of the GPU after a reserve for the prefill
    activations (1.5 MiB per token of the default chunk), the CUDA graphs (2 MiB per batch of the
    largest graph), large parallel groups, and with attention DP, padded graphs per DP rank.

    ``tp_size`` is SGLang's: every GPU of one pipeline stage, the attention-DP ranks included.
    """
    _, chunk, small_bs, large_bs = next(b for b in _SGLANG_GPU_DEFAULTS if gpu_memory_mib < b[0])
    graph_bs = small_bs if tp_size < 4 else large_bs
    reserved_mib = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp_size * pp_size / 8 * 1024
    if dp_size > 1:  # --enable-dp-attention
        reserved_mib += graph_bs * dp_size * 3
        if graph_bs > 300:
            reserved_mib += graph_bs * dp_size * 1.5
    if gpu_memory_mib > 60 * 1024:
        reserved_mib = max(reserved_mib, 10 * 1024)
    if speculative:  # EAGLE/MTP draft model and its graphs
        reserved_mib += 2 * 1024
    return round((gpu_memory_mib - reserved_mib) / gpu_memory_mib, 3)


def default_memory_fraction(
    profile: BackendProfile, system: System, shape: ParallelShape, *, nextn: int
) -> float:
    """The memory fraction ``profile``'s server starts with when its launch sets none."""
    if profile.default_memory_fraction is not None:
        return profile.default_memory_fraction
    return sglang_default_memory_fraction(
        system.hbm_bytes / 2**20,
        tp_size=shape.gpus_per_stage,
        pp_size=shape.pp,
        dp_size=shape.attention_dp,
        speculative=nextn > 0,
    )


def estimate_memory(
    model: ModelSpec,
    system: System,
    shape: ParallelShape,
    *,
    backend: str = "vllm",
    gpu_memory_utilization: float | None = None,
    kv_cache_dtype: str = "auto",
    block_size: int = 64,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    max_model_len: int | None = None,
    nextn: int = 0,
    enable_prefix_caching: bool = True,
    state_slots: int | None = None,
) -> MemoryEstimate:
    """KV capacity and memory breakdown of one GPU; infeasible shapes say why instead of going negative.

    ``gpu_memory_utilization`` is the backend's memory fraction as launched. Left out (None), the
    server's own default applies, and when that cannot hold the weights and one
    ``max_model_len`` sequence, :data:`MAX_MEMORY_FRACTION`: a deployment that needs a raised
    fraction runs with one, so it is infeasible only when even that does not hold it. A given
    fraction is taken as it is.
    """
    profile = backend_profile(backend)
    _check_positive(
        block_size=block_size, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
    )
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(
            f"`0 < gpu_memory_utilization <= 1` must hold, but got {gpu_memory_utilization}",
            where="gpu_memory_utilization",
        )
    if nextn < 0:
        raise ConfigError(f"`nextn >= 0` must hold, but got {nextn}", where="nextn")
    check_shape(model, shape)
    kv_dtype = model.resolve_kv_dtype(kv_cache_dtype, backend)
    max_len = max_model_len or model.max_context_tokens
    if max_model_len is not None and max_model_len < 1:
        raise ConfigError(f"`max_model_len >= 1` must hold, but got {max_model_len}", where="max_model_len")

    weights = weights_bytes_per_gpu(model, shape, nextn=nextn)
    activations = activation_bytes_per_gpu(
        model, shape, max_num_batched_tokens=max_num_batched_tokens * (1 + nextn), max_num_seqs=max_num_seqs
    )
    comm_gpus = max(shape.gpus_per_stage, shape.pp)
    nccl = system.nccl_bytes(comm_gpus)
    runtime = system.runtime_overhead_gib * 2**30 + nccl
    per_token = kv_bytes_per_token_per_gpu(model, shape, kv_dtype)
    state = state_bytes_per_request_per_gpu(model, shape)
    sliding = 0.0
    if model.num_sliding_layers:
        sliding_layers = math.ceil(model.num_sliding_layers / shape.pp)
        sliding = (
            max_num_seqs
            * min(model.sliding_window, max_len)
            * sliding_layers
            * per_token
            / max(math.ceil(model.num_full_attention_layers / shape.pp), 1)
        )
    budget_of = _Budget(
        profile=profile,
        system=system,
        shape_text=shape.describe(moe=model.is_moe),
        weights=weights,
        activations=activations,
        runtime=runtime,
        nccl=nccl,
        per_token=per_token,
        state=state,
        sliding=sliding,
        block_size=block_size,
        max_len=max_len,
        max_num_seqs=max_num_seqs,
        prefix_caching=enable_prefix_caching,
        state_slots=state_slots,
    )
    fraction = gpu_memory_utilization
    if fraction is None:
        fraction = default_memory_fraction(profile, system, shape, nextn=nextn)
    kv = budget_of(fraction)
    raised = False
    if kv.reason is not None and gpu_memory_utilization is None and fraction < MAX_MEMORY_FRACTION:
        at_most = budget_of(MAX_MEMORY_FRACTION)
        raised = at_most.reason is None
        if raised:
            fraction, kv = MAX_MEMORY_FRACTION, at_most
        else:
            kv = replace(
                at_most,
                reason=f"{at_most.reason}; {MAX_MEMORY_FRACTION} is the highest fraction deployments set",
            )
    return MemoryEstimate(
        model=model.name,
        system=system.name,
        backend=backend,
        shape=shape.describe(moe=model.is_moe),
        kv_cache_dtype=kv_dtype,
        feasible=kv.reason is None,
        reason=kv.reason,
        memory_fraction=fraction,
        memory_fraction_raised=raised,
        capacity_bytes=system.hbm_bytes,
        weights_bytes_per_gpu=weights,
        activation_bytes_per_gpu=activations,
        runtime_overhead_bytes_per_gpu=runtime,
        kv_budget_bytes_per_gpu=max(kv.budget, 0.0),
        kv_bytes_per_token_per_gpu=per_token,
        sliding_kv_bytes_per_gpu=sliding,
        state_bytes_per_request_per_gpu=state,
        max_running_requests=kv.running,
        kv_tokens_per_rank=kv.tokens if kv.reason is None else 0,
        num_gpu_blocks=kv.tokens // block_size if kv.reason is None else 0,
        block_size=block_size,
        max_model_len=max_len,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class _KvBudget:
    budget: float  # bytes for KV (and recurrent state) after the state pool, per GPU
    running: int
    state_pool: float
    tokens: int
    reason: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Budget:
    """The KV budget of one GPU as a function of the memory fraction, everything else fixed."""

    profile: BackendProfile
    system: System
    shape_text: str
    weights: float
    activations: float
    runtime: float
    nccl: float
    per_token: float
    state: float
    sliding: float
    block_size: int
    max_len: int
    max_num_seqs: int
    prefix_caching: bool
    state_slots: int | None

    def __call__(self, fraction: float) -> _KvBudget:
        capacity = self.system.hbm_bytes
        weights_limit: float
        if self.profile.kv_budget == "of_free":
            budget = (capacity - self.weights - self.activations - self.runtime) * fraction
            weights_limit = capacity
        elif self.profile.fraction_covers == "weights_and_kv":
            # The fraction is of the memory free once the process group is up (SGLang measures it
            # then); the activations, CUDA graphs and workspaces live in what it leaves.
            weights_limit = (capacity - self.nccl) * fraction
            budget = weights_limit - self.weights
        else:
            weights_limit = capacity * fraction
            budget = weights_limit - self.weights - self.activations - self.runtime
        running, state_pool = 0, 0.0
        if self.state:
            running, state_pool = split_state_pool(
                budget,
                self.state,
                backend=self.profile.name,
                max_num_seqs=self.max_num_seqs,
                prefix_caching=self.prefix_caching,
                state_slots=self.state_slots,
            )
            budget -= state_pool
        tokens = max(int((budget - self.sliding) // self.per_token), 0) if budget > self.sliding else 0
        reason = None
        if self.weights >= weights_limit:
            room = f"{self.system.name} has {capacity / 2**30:.1f} GiB"
            if weights_limit < capacity:
                room = (
                    f"a memory fraction of {fraction:g} leaves {weights_limit / 2**30:.1f} GiB of "
                    f"{self.system.name}'s {capacity / 2**30:.1f} GiB for weights and KV"
                )
            reason = f"weights need {self.weights / 2**30:.1f} GiB per GPU but {room} ({self.shape_text})"
        elif self.state and running < 1:
            reason = (
                f"recurrent state of one request needs {self.state / 2**30:.2f} GiB per GPU; "
                f"{(budget + state_pool) / 2**30:.2f} GiB left after weights, activations and runtime"
            )
        elif tokens < self.block_size:
            reason = f"no KV budget left: {budget / 2**30:.2f} GiB after weights, activations and runtime"
        elif tokens < self.max_len:
            reason = f"KV cache holds {tokens} tokens, less than one max_model_len={self.max_len} sequence"
        return _KvBudget(budget=budget, running=running, state_pool=state_pool, tokens=tokens, reason=reason)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"`{name} >= 1` must hold, but got {name}={value!r}", where=name)
