"""Memory of one GPU in a parallel shape: weights, activations, runtime, and what is left for KV.

The budget rule follows each backend: vLLM and SGLang give the KV cache
``capacity * gpu_memory_utilization - non_kv``; TRT-LLM gives it
``(capacity - non_kv) * free_gpu_memory_fraction``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from aisimulate.catalog.backends import BACKENDS, Backend, backend_profile
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


def estimate_memory(
    model: ModelSpec,
    system: System,
    shape: ParallelShape,
    *,
    backend: str = "vllm",
    gpu_memory_utilization: float = 0.9,
    kv_cache_dtype: str = "auto",
    block_size: int = 64,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    max_model_len: int | None = None,
    nextn: int = 0,
    enable_prefix_caching: bool = True,
    state_slots: int | None = None,
) -> MemoryEstimate:
    """KV capacity and memory breakdown of one GPU; infeasible shapes say why instead of going negative."""
    check_backend(backend)
    _check_positive(
        block_size=block_size, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
    )
    if not 0 < gpu_memory_utilization <= 1:
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
    runtime = system.runtime_overhead_gib * 2**30 + system.nccl_bytes(comm_gpus)
    non_kv = weights + activations + runtime
    capacity = system.hbm_bytes
    of_free = backend_profile(backend).kv_budget == "of_free"
    if of_free:
        budget = (capacity - non_kv) * gpu_memory_utilization
    else:
        budget = capacity * gpu_memory_utilization - non_kv

    per_token = kv_bytes_per_token_per_gpu(model, shape, kv_dtype)
    state = state_bytes_per_request_per_gpu(model, shape)
    running, state_pool = 0, 0.0
    if state:
        running, state_pool = split_state_pool(
            budget,
            state,
            backend=backend,
            max_num_seqs=max_num_seqs,
            prefix_caching=enable_prefix_caching,
            state_slots=state_slots,
        )
        budget -= state_pool
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
    tokens = max(int((budget - sliding) // per_token), 0) if budget > sliding else 0
    reason = None
    if weights >= capacity * (1.0 if of_free else gpu_memory_utilization):
        reason = (
            f"weights need {weights / 2**30:.1f} GiB per GPU but {system.name} has "
            f"{capacity / 2**30:.1f} GiB ({shape.describe(moe=model.is_moe)})"
        )
    elif state and running < 1:
        reason = (
            f"recurrent state of one request needs {state / 2**30:.2f} GiB per GPU; "
            f"{(budget + state_pool) / 2**30:.2f} GiB left after weights, activations and runtime"
        )
    elif tokens < block_size:
        reason = f"no KV budget left: {budget / 2**30:.2f} GiB after weights, activations and runtime"
    elif tokens < max_len:
        reason = f"KV cache holds {tokens} tokens, less than one max_model_len={max_len} sequence"
    return MemoryEstimate(
        model=model.name,
        system=system.name,
        backend=backend,
        shape=shape.describe(moe=model.is_moe),
        kv_cache_dtype=kv_dtype,
        feasible=reason is None,
        reason=reason,
        capacity_bytes=capacity,
        weights_bytes_per_gpu=weights,
        activation_bytes_per_gpu=activations,
        runtime_overhead_bytes_per_gpu=runtime,
        kv_budget_bytes_per_gpu=max(budget, 0.0),
        kv_bytes_per_token_per_gpu=per_token,
        sliding_kv_bytes_per_gpu=sliding,
        state_bytes_per_request_per_gpu=state,
        max_running_requests=running,
        kv_tokens_per_rank=tokens if reason is None else 0,
        num_gpu_blocks=tokens // block_size if reason is None else 0,
        block_size=block_size,
        max_model_len=max_len,
    )


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"`{name} >= 1` must hold, but got {name}={value!r}", where=name)
