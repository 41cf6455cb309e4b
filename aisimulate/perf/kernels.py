"""Roofline cost of the kernel families a forward pass is made of.

Each family is a frozen set of coefficients built once from geometry (parameters, heads, bytes),
hardware peaks and a calibrated fit. ``time_ms`` evaluates it on numpy arrays (or floats);
``scalar()`` returns the same formula as a closure over plain floats, several times faster, for
the replay's per-pass calls. Tests hold the two to equal results.
The calibration script fits the same objects to single-kernel measurements, and the analytic
model sums them over layers, so one formula serves both.

Units: peaks in TFLOPS become flops per ms as ``tflops * 1e9``; bandwidths in GB/s become bytes
per ms as ``gbps * 1e6``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from aisimulate.catalog.dtypes import math_dtype

ACT_BYTES = 2.0  # activations travel in bf16


def flops_per_ms(tflops: float) -> float:
    return tflops * 1e9


def bytes_per_ms(gbps: float) -> float:
    return gbps * 1e6


# ---- fits (what calibration produces) -----------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmFit:
    """Compute efficiency ``e_max * m / (m + m_half)`` rises with the token count m.

    ``per_k_ms`` is a fixed cost per element of each GEMM's reduction (k): NVFP4 kernels at decode
    sizes take as long for a narrow output as for a wide one of the same k (few tiles, each
    walking all of k), which weight bytes alone do not describe."""

    e_max: float = 0.7
    m_half: float = 64.0
    mem_eff: float = 0.75
    t0_ms: float = 0.004
    per_k_ms: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionFit:
    compute_eff: float = 0.5  # prefill: fraction of the bf16 peak for long chunks
    kv_half: float = 0.0  # prefill efficiency ramp: kv_len / (kv_len + kv_half) of compute_eff
    mem_eff: float = 0.7  # decode: fraction of HBM bandwidth
    t0_ms: float = 0.01
    per_request_ms: float = 0.0005
    # Prefill: the head dims (qk + v) of matmul work a (query, key) pair costs at least. A pair's
    # softmax (exponent, running max and sum) is the same whatever the head size and runs beside
    # its two matmuls on other units, so narrow heads (gpt-oss's 64 dims) are bound by it rather
    # than by their FLOPs (AIConfigurator measures them 14-38% slower than a FLOP-proportional
    # price on every system). Fitted on 64-dim points; 0: FLOPs alone.
    min_pair_dims: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class SparseAttentionFit:
    """DSA (DeepSeek-V3.2, GLM-5) kernels as fractions of the chip's own peaks.

    Fitted on AIConfigurator 0.12's B200 SGLang 0.5.14 tables (``sparse_attention/``):
    ``glm5_dsa_attn_module`` (flash_mla_sparse_fwd: 16,384 queries x 2,048 selected keys, 64
    heads, 8.0 ms per layer), ``glm5_mqa_logits_module`` (deep_gemm fp8 MQA logits: 0.57 ms per
    layer for a 16k prompt), ``glm5_topk_module`` (0.87 ms for a 16k prompt, nothing at or below
    2,048 keys) and ``dsa_generation_module`` of zai-org/GLM-5-FP8 (decode: +0.05 ns per context
    token and layer at batch 16-64 once the context passes top-k). Efficiencies transfer to
    other chips as fractions of their peaks, as the other fits do.
    """

    selected_compute_eff: float = 0.26  # sparse MLA kernel, bf16 peak, per (query, selected key)
    indexer_compute_eff: float = 0.43  # fp8 logits per (query, key) pair, fp8 peak
    topk_mem_eff: float = 0.08  # top-k over fp32 scores, per scored key of a query past top-k
    indexer_mem_eff: float = 0.35  # decode: indexer keys read per context token
    # Decode: what a layer of a pass adds once its sequences' contexts pass top-k, whatever the
    # batch (the backend's top-k selection and sparse path switching on); 0: none measured.
    past_topk_decode_ms: float = 0.0
    # Decode: what a layer's indexer kernels cost per pass whatever the context; 0: none measured.
    indexer_decode_ms: float = 0.0


# TensorRT-LLM's DSA decode steps up once the context passes top-k: AIConfigurator 0.12's
# ``dsa_generation_module`` of zai-org/GLM-5 (TensorRT-LLM 1.3.0rc20, fp8 KV cache) is
# 0.030-0.042 ms (median 0.037) a layer slower at 4,096 context tokens than at 1,024 on GB200
# and B300, at 8, 16 and 32 heads and batch 1-16 (16 heads on GB200: 0.080 -> 0.116 ms at
# batch 1, 0.085 -> 0.124 at 16), then grows slowly with the context as the indexer does.
# SGLang 0.5.14's module of the same model steps up too, at top-k itself: on B300 TP8 at batch 1
# it is 0.0662 ms a layer at 1,536 context tokens, 0.0746 at 2,048 and 0.0753 at 3,072 (bf16 KV).
# Less the growth the indexer and sparse kernel above already price, its 1,024 -> 2,048 rise is
# 0.007 ms a layer (median of B200, B300, GB200, H100 and H200 at TP1-8, both KV formats, batch
# 1-16; quartiles 0.005-0.008).
DSA_PAST_TOPK_DECODE_MS = {"trtllm": 0.037, "sglang": 0.007}

# SGLang's DSA indexer costs a decode pass a fixed time per layer, far above its keys' bytes:
# AIConfigurator 0.12's SGLang 0.5.14 ``dsa_generation_module`` minus its
# ``dsa_generation_module_skip_indexer`` (nvidia/GLM-5.2-NVFP4, GLM-5's indexer geometry: 32 heads
# of 128, top-k 2,048) is 0.0265 ms a layer at TP8 with a bf16 KV cache on B300 and on GB200
# (batch 1-16, contexts up to 1,024; quartiles 0.025-0.029), flat in the context below top-k.
DSA_INDEXER_DECODE_MS = {"sglang": 0.0265}


@dataclass(frozen=True, kw_only=True, slots=True)
class LinearAttentionFit:
    """Gated DeltaNet layers (Qwen3.5) as fractions of the chip's own peaks.

    Fitted on AIConfigurator 0.12's B200 SGLang 0.5.14 ``linear_attention/gdn_perf`` rows of
    Qwen/Qwen3.5-397B-A17B (64 value heads of 128x128): chunked prefill (conv + chunk_gated_delta_rule)
    0.124 us per token and layer at 32k-131k tokens, about 3 % of the bf16 peak on
    ``8 * heads * d_k * d_v`` flops per token; decode (conv update + fused recurrent step)
    1.29 us per sequence and layer at batch 256-512, the fp32 state read and written at 85 % of HBM.
    """

    prefill_compute_eff: float = 0.03
    decode_mem_eff: float = 0.85
    t0_ms: float = 0.005  # per layer and pass


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeFit:
    """Like GEMM, but efficiency rises with routed tokens per touched expert. Routing is skewed,
    so with experts split over ``moe_ep`` GPUs the busiest one computes ``moe_ep ** ep_skew``
    times its even share of the routed pairs (0: perfectly balanced, 1: all on one GPU)."""

    e_max: float = 0.5
    x_half: float = 32.0
    mem_eff: float = 0.6
    t0_ms: float = 0.02
    ep_skew: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveFit:
    """``latency(n) + bytes_on_wire / (link * bw_eff)``, latency growing with log2(n)."""

    bw_eff: float = 0.7
    latency_ms: float = 0.006
    latency_per_log2_ms: float = 0.001

    def latency(self, num_gpus: int) -> float:
        return self.latency_ms + self.latency_per_log2_ms * math.log2(max(num_gpus, 2) / 2)


@dataclass(frozen=True, kw_only=True, slots=True)
class OverheadFit:
    """Framework time per pass (scheduling, sampling, launches) outside the model's kernels."""

    base_ms: float = 1.0
    per_sequence_ms: float = 0.002


# ---- cost objects -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Roofline:
    """``max(c_slope*m + c_fixed, m_fixed + m_slope*m) + fixed`` for m > 0, else 0."""

    c_slope: float
    c_fixed: float
    m_fixed: float
    m_slope: float
    fixed: float

    def time_ms(self, m: Any) -> Any:
        return (m > 0) * (
            np.maximum(self.c_slope * m + self.c_fixed, self.m_fixed + self.m_slope * m) + self.fixed
        )

    def scalar(self) -> Callable[[float], float]:
        """The same formula as a closure over plain floats: the replay's hot path."""
        cs, cf, mf, ms, fx = _fields(self)

        def time_ms(m: float) -> float:
            if m <= 0:
                return 0.0
            compute = cs * m + cf
            memory = mf + ms * m
            return (compute if compute > memory else memory) + fx

        return time_ms

    def __add__(self, other: Roofline) -> Roofline:
        """Sum of layers with the same arithmetic intensity (exact when the crossovers coincide)."""
        return Roofline(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))

    def scaled(self, k: float) -> Roofline:
        return Roofline(*(k * a for a in _fields(self)))


def _fields(r: Roofline) -> tuple[float, ...]:
    return (r.c_slope, r.c_fixed, r.m_fixed, r.m_slope, r.fixed)


def gemm_roofline(
    *,
    weight_params: float,
    act_elems_per_token: float,
    weight_bytes_per_param: float,
    peak_tflops: float,
    hbm_gbps: float,
    fit: GemmFit,
    num_kernels: float = 1.0,
    reduction_k: float = 0.0,
) -> Roofline:
    """GEMMs reading ``weight_params`` weights once per pass and moving activations per token;
    ``reduction_k`` is the sum of their k."""
    per_flop = 1.0 / (flops_per_ms(peak_tflops) * fit.e_max)
    per_byte = 1.0 / (bytes_per_ms(hbm_gbps) * fit.mem_eff)
    return Roofline(
        c_slope=2 * weight_params * per_flop,
        c_fixed=2 * weight_params * fit.m_half * per_flop,
        m_fixed=weight_params * weight_bytes_per_param * per_byte,
        m_slope=act_elems_per_token * ACT_BYTES * per_byte,
        fixed=num_kernels * fit.t0_ms + reduction_k * fit.per_k_ms,
    )


@dataclass(frozen=True, slots=True)
class ContextAttention:
    """Causal prefill attention over ``pairs`` (query, key) pairs, compute-bound."""

    per_pair_ms: float
    per_context_token_ms: float  # reading cached KV of earlier chunks
    per_request_ms: float
    fixed_ms: float
    sliding_per_pair_ms: float = 0.0
    sliding_window: float = 0.0
    # Short key spans leave tiles idle: efficiency kv / (kv + kv_half) of the long-span value adds
    # ``per_pair * kv_half`` for every query token.
    per_query_ms: float = 0.0

    def time_ms(self, pairs: Any, requests: Any, context_tokens: Any, new_tokens: Any) -> Any:
        sliding = self.sliding_per_pair_ms * np.minimum(pairs, new_tokens * self.sliding_window)
        busy = self.per_pair_ms * pairs + sliding + self.per_context_token_ms * context_tokens
        busy = busy + self.per_query_ms * new_tokens
        return (requests > 0) * (busy + self.per_request_ms * requests + self.fixed_ms)

    def scalar(self) -> Callable[[float, float, float, float], float]:
        pair, ctx, req, fixed = (
            self.per_pair_ms,
            self.per_context_token_ms,
            self.per_request_ms,
            self.fixed_ms,
        )
        sliding, window, query = self.sliding_per_pair_ms, self.sliding_window, self.per_query_ms

        def time_ms(pairs: float, requests: float, context_tokens: float, new_tokens: float) -> float:
            if requests <= 0:
                return 0.0
            busy = pair * pairs + ctx * context_tokens + query * new_tokens + req * requests + fixed
            if sliding:
                capped = new_tokens * window
                busy += sliding * (pairs if pairs < capped else capped)
            return busy

        return time_ms


def context_attention(
    *,
    num_layers: float,
    num_heads: float,
    qk_dim: float,
    v_dim: float,
    kv_bytes_per_token_layer: float,
    peak_tflops: float,
    hbm_gbps: float,
    fit: AttentionFit,
    num_sliding_layers: float = 0,
    sliding_window: float = 0,
) -> ContextAttention:
    flops_per_pair = 2 * num_heads * max(qk_dim + v_dim, fit.min_pair_dims)
    per_flop = 1.0 / (flops_per_ms(peak_tflops) * fit.compute_eff)
    return ContextAttention(
        per_pair_ms=num_layers * flops_per_pair * per_flop,
        per_context_token_ms=(num_layers + num_sliding_layers)
        * kv_bytes_per_token_layer
        / (bytes_per_ms(hbm_gbps) * fit.mem_eff),
        per_request_ms=(num_layers + num_sliding_layers) * fit.per_request_ms,
        fixed_ms=(num_layers + num_sliding_layers) * fit.t0_ms,
        sliding_per_pair_ms=num_sliding_layers * flops_per_pair * per_flop,
        sliding_window=sliding_window,
        per_query_ms=(num_layers + num_sliding_layers) * flops_per_pair * per_flop * fit.kv_half,
    )


def mla_context_math(kv_dtype: str, math_dtypes: frozenset[str] | set[str]) -> str:
    """The tensor-core dtype an MLA prefill kernel over a ``kv_dtype`` cache is priced at: its
    measured FP8-cache kernels outrun the bf16 peak's share the bf16-cache ones reach (B300: 1.63
    against 1.93 ms a layer for one 8k prompt, 128 heads), so the fits of each format are
    fractions of that format's own peak."""
    return math_dtype(kv_dtype, math_dtypes)


@dataclass(frozen=True, slots=True)
class GenerationAttention:
    """Decode attention: every emitting sequence reads its whole KV (memory-bound), or for
    absorbed MLA the latent matmuls may dominate (compute)."""

    per_context_token_mem_ms: float
    per_context_token_compute_ms: float  # times tokens_per_step
    per_sequence_ms: float
    fixed_ms: float
    sliding_per_token_ms: float = 0.0
    sliding_window: float = 0.0

    def time_ms(self, sequences: Any, context_tokens: Any, tokens_per_step: Any) -> Any:
        memory = self.per_context_token_mem_ms * context_tokens
        memory = memory + self.sliding_per_token_ms * np.minimum(
            context_tokens, sequences * self.sliding_window
        )
        compute = self.per_context_token_compute_ms * context_tokens * tokens_per_step
        return (sequences > 0) * (
            np.maximum(memory, compute) + self.per_sequence_ms * sequences + self.fixed_ms
        )

    def over_contexts(
        self, sequences: float, context_tokens: np.ndarray, tokens_per_step: float
    ) -> np.ndarray:
        """``time_ms`` of one batch (``sequences`` > 0) at many summed contexts: a decode
        stretch's one per-pass term. Memory-bound without a sliding window (most models), it is
        one multiply and two in-place adds, the same operations in the same order."""
        mem = self.per_context_token_mem_ms
        compute = self.per_context_token_compute_ms * tokens_per_step
        # A margin well above rounding: compute then stays below memory at every context.
        if self.sliding_per_token_ms or compute >= mem * (1 - 1e-9):
            spelled: np.ndarray = self.time_ms(sequences, context_tokens, tokens_per_step)
            return spelled
        times = context_tokens * mem
        times += self.per_sequence_ms * sequences
        times += self.fixed_ms
        return times

    def scalar(self) -> Callable[[float, float, float], float]:
        mem, comp, seq, fixed = (
            self.per_context_token_mem_ms,
            self.per_context_token_compute_ms,
            self.per_sequence_ms,
            self.fixed_ms,
        )
        sliding, window = self.sliding_per_token_ms, self.sliding_window

        def time_ms(sequences: float, context_tokens: float, tokens_per_step: float) -> float:
            if sequences <= 0:
                return 0.0
            memory = mem * context_tokens
            if sliding:
                capped = sequences * window
                memory += sliding * (context_tokens if context_tokens < capped else capped)
            compute = comp * context_tokens * tokens_per_step
            return (memory if memory > compute else compute) + seq * sequences + fixed

        return time_ms


def generation_attention(
    *,
    num_layers: float,
    num_heads: float,
    kv_bytes_per_token_layer: float,
    flops_per_context_token_layer: float,
    peak_tflops: float,
    hbm_gbps: float,
    fit: AttentionFit,
    num_sliding_layers: float = 0,
    sliding_window: float = 0,
) -> GenerationAttention:
    per_byte = 1.0 / (bytes_per_ms(hbm_gbps) * fit.mem_eff)
    layers = num_layers + num_sliding_layers
    return GenerationAttention(
        per_context_token_mem_ms=num_layers * kv_bytes_per_token_layer * per_byte,
        per_context_token_compute_ms=layers
        * flops_per_context_token_layer
        / (flops_per_ms(peak_tflops) * fit.compute_eff),
        per_sequence_ms=layers * fit.per_request_ms,
        fixed_ms=layers * fit.t0_ms,
        sliding_per_token_ms=num_sliding_layers * kv_bytes_per_token_layer * per_byte,
        sliding_window=sliding_window,
    )


@dataclass(frozen=True, slots=True)
class SparseContextAttention:
    """DSA prefill: a query at position j scores all j keys with the indexer, and attends to all
    of them only while ``j <= top_k``; past that it attends to the ``top_k`` keys selected (the
    sparse kernel) after a top-k over its j scores. Chunks are taken as equal (their means), the
    aggregates a pass carries, so the cost stays a handful of operations whatever the batch."""

    dense: ContextAttention  # the ordinary kernel, for the pairs of queries within top-k
    top_k: float
    per_selected_pair_ms: float
    per_indexer_pair_ms: float
    per_topk_pair_ms: float
    per_indexer_context_token_ms: float  # cached indexer keys of earlier chunks, read once

    def time_ms(self, pairs: Any, requests: Any, context_tokens: Any, new_tokens: Any) -> Any:
        k = self.top_k
        safe = np.maximum(requests, 1)
        c, n = context_tokens / safe, new_tokens / safe
        beyond = np.minimum(np.maximum(c + n - k, 0), n)  # queries of a chunk past top-k
        # Their causal pairs: positions c+n-beyond+1 .. c+n, summed.
        beyond_pairs = requests * beyond * (c + n - (beyond - 1) / 2)
        within = np.maximum(pairs - beyond_pairs, 0)
        # Cached latents are read for the keys attended: at most top-k per chunk's query span.
        read = np.minimum(context_tokens, requests * k)
        dense = self.dense.time_ms(within, requests, read, new_tokens)
        sparse = (
            self.per_selected_pair_ms * k * requests * beyond
            + self.per_indexer_pair_ms * pairs
            + self.per_topk_pair_ms * beyond_pairs
            + self.per_indexer_context_token_ms * context_tokens
        )
        return dense + (requests > 0) * sparse

    def scalar(self) -> Callable[[float, float, float, float], float]:
        dense, k = self.dense.scalar(), self.top_k
        selected, indexer = self.per_selected_pair_ms * k, self.per_indexer_pair_ms
        topk, indexer_ctx = self.per_topk_pair_ms, self.per_indexer_context_token_ms

        def time_ms(pairs: float, requests: float, context_tokens: float, new_tokens: float) -> float:
            if requests <= 0:
                return 0.0
            c, n = context_tokens / requests, new_tokens / requests
            beyond = c + n - k
            beyond = 0.0 if beyond < 0 else (n if beyond > n else beyond)
            beyond_pairs = requests * beyond * (c + n - (beyond - 1) / 2)
            within = pairs - beyond_pairs
            capped = requests * k
            read = context_tokens if context_tokens < capped else capped
            sparse = (
                selected * requests * beyond
                + indexer * pairs
                + topk * beyond_pairs
                + indexer_ctx * context_tokens
            )
            return dense(within if within > 0 else 0.0, requests, read, new_tokens) + sparse

        return time_ms


@dataclass(frozen=True, slots=True)
class SparseGenerationAttention:
    """DSA decode: each sequence reads its indexer keys over the whole context (linear in
    context), then at most ``top_k`` latents. With the summed context of ``sequences`` the
    attended latents are ``min(context, sequences * top_k)``: exact when every context is on
    the same side of top-k, an upper bound otherwise."""

    dense: GenerationAttention
    top_k: float
    per_context_token_indexer_mem_ms: float
    per_context_token_indexer_compute_ms: float  # times tokens_per_step
    past_topk_ms: float = 0.0  # every layer's step once the mean context passes top-k
    indexer_fixed_ms: float = 0.0  # every layer's indexer kernels, whatever the context

    def time_ms(self, sequences: Any, context_tokens: Any, tokens_per_step: Any) -> Any:
        g = self.dense
        capped = sequences * self.top_k
        attended = np.minimum(context_tokens, capped)
        memory = (
            g.per_context_token_mem_ms * attended + self.per_context_token_indexer_mem_ms * context_tokens
        )
        compute = (
            g.per_context_token_compute_ms * attended
            + self.per_context_token_indexer_compute_ms * context_tokens
        ) * tokens_per_step
        past = self.past_topk_ms * (context_tokens > capped)
        return (sequences > 0) * (
            np.maximum(memory, compute)
            + g.per_sequence_ms * sequences
            + g.fixed_ms
            + self.indexer_fixed_ms
            + past
        )

    def over_contexts(
        self, sequences: float, context_tokens: np.ndarray, tokens_per_step: float
    ) -> np.ndarray:
        """``time_ms`` at many summed contexts: array operations, none per sequence."""
        times: np.ndarray = self.time_ms(sequences, context_tokens, tokens_per_step)
        return times

    def scalar(self) -> Callable[[float, float, float], float]:
        g, k = self.dense, self.top_k
        mem, comp, seq, fixed = (
            g.per_context_token_mem_ms,
            g.per_context_token_compute_ms,
            g.per_sequence_ms,
            g.fixed_ms,
        )
        idx_mem, idx_comp = self.per_context_token_indexer_mem_ms, self.per_context_token_indexer_compute_ms
        past_topk = self.past_topk_ms
        fixed += self.indexer_fixed_ms

        def time_ms(sequences: float, context_tokens: float, tokens_per_step: float) -> float:
            if sequences <= 0:
                return 0.0
            capped = sequences * k
            attended = context_tokens if context_tokens < capped else capped
            memory = mem * attended + idx_mem * context_tokens
            compute = (comp * attended + idx_comp * context_tokens) * tokens_per_step
            past = past_topk if context_tokens > capped else 0.0
            return (memory if memory > compute else compute) + seq * sequences + fixed + past

        return time_ms


def sparse_attention(
    *,
    context: ContextAttention,
    generation: GenerationAttention,
    num_layers: float,
    num_heads: float,
    kv_lora_rank: float,
    qk_rope_head_dim: float,
    top_k: float,
    index_n_heads: float,
    index_head_dim: float,
    indexer_key_bytes_per_token_layer: float,
    bf16_tflops: float,
    fp8_tflops: float,
    hbm_gbps: float,
    fit: SparseAttentionFit,
) -> tuple[SparseContextAttention, SparseGenerationAttention]:
    """The dense MLA costs wrapped with DSA's indexer, top-k and sparse kernel."""
    per_byte = 1.0 / bytes_per_ms(hbm_gbps)
    # Absorbed MLA over a selected key: scores on latent + rope, values in the latent.
    selected_flops = 2 * num_heads * (2 * kv_lora_rank + qk_rope_head_dim)
    indexer_flops = 2 * index_n_heads * index_head_dim
    indexer_per_pair = num_layers * indexer_flops / (flops_per_ms(fp8_tflops) * fit.indexer_compute_eff)
    indexer_bytes = num_layers * indexer_key_bytes_per_token_layer * per_byte
    prefill = SparseContextAttention(
        dense=context,
        top_k=top_k,
        per_selected_pair_ms=num_layers
        * selected_flops
        / (flops_per_ms(bf16_tflops) * fit.selected_compute_eff),
        per_indexer_pair_ms=indexer_per_pair,
        per_topk_pair_ms=num_layers * 4.0 * per_byte / fit.topk_mem_eff,
        per_indexer_context_token_ms=indexer_bytes / fit.indexer_mem_eff,
    )
    decode = SparseGenerationAttention(
        dense=generation,
        top_k=top_k,
        per_context_token_indexer_mem_ms=indexer_bytes / fit.indexer_mem_eff,
        per_context_token_indexer_compute_ms=indexer_per_pair,
        past_topk_ms=num_layers * fit.past_topk_decode_ms,
        indexer_fixed_ms=num_layers * fit.indexer_decode_ms,
    )
    return prefill, decode


@dataclass(frozen=True, slots=True)
class LinearAttention:
    """Gated DeltaNet layers: prefill linear in the new tokens (chunked scan), decode one state
    update per verified token whatever the context (the recurrent state is fixed-size)."""

    per_token_ms: float
    per_step_ms: float
    fixed_ms: float

    def time_ms(self, new_tokens: Any, decode_steps: Any) -> Any:
        work = new_tokens + decode_steps
        return (work > 0) * (self.per_token_ms * new_tokens + self.per_step_ms * decode_steps + self.fixed_ms)

    def scalar(self) -> Callable[[float, float], float]:
        per_token, per_step, fixed = self.per_token_ms, self.per_step_ms, self.fixed_ms

        def time_ms(new_tokens: float, decode_steps: float) -> float:
            if new_tokens + decode_steps <= 0:
                return 0.0
            return per_token * new_tokens + per_step * decode_steps + fixed

        return time_ms


def linear_attention(
    *,
    num_layers: float,
    num_value_heads: float,
    key_head_dim: float,
    value_head_dim: float,
    state_bytes_per_layer: float,
    bf16_tflops: float,
    hbm_gbps: float,
    fit: LinearAttentionFit,
) -> LinearAttention:
    """``num_value_heads`` and ``state_bytes_per_layer`` are one GPU's share (heads split by tp)."""
    flops_per_token = 8 * num_value_heads * key_head_dim * value_head_dim
    return LinearAttention(
        per_token_ms=num_layers * flops_per_token / (flops_per_ms(bf16_tflops) * fit.prefill_compute_eff),
        per_step_ms=num_layers * 2 * state_bytes_per_layer / (bytes_per_ms(hbm_gbps) * fit.decode_mem_eff),
        fixed_ms=num_layers * fit.t0_ms if num_layers else 0.0,
    )


@dataclass(frozen=True, slots=True)
class MoeBlock:
    """Routed experts of one GPU: tokens x top-k pairs spread over ``num_experts`` experts."""

    experts_on_gpu: float
    pairs_per_token: float  # top-k / moe_ep: routed pairs landing on this GPU per token
    per_pair_compute_ms: float
    per_touched_compute_ms: float  # x_half worth of pairs per touched expert
    per_touched_bytes_ms: float
    per_pair_bytes_ms: float
    fixed_ms: float

    def scalar(self) -> Callable[[float], float]:
        experts, per_token = self.experts_on_gpu, self.pairs_per_token
        pair_c, touched_c = self.per_pair_compute_ms, self.per_touched_compute_ms
        touched_b, pair_b, fixed = self.per_touched_bytes_ms, self.per_pair_bytes_ms, self.fixed_ms
        exp = math.exp

        def time_ms(tokens: float) -> float:
            if tokens <= 0:
                return 0.0
            pairs = tokens * per_token
            touched = experts * (1.0 - exp(-pairs / experts))
            compute = pair_c * pairs + touched_c * touched
            memory = touched_b * touched + pair_b * pairs
            return (compute if compute > memory else memory) + fixed

        return time_ms

    def time_ms(self, tokens: Any) -> Any:
        pairs = tokens * self.pairs_per_token
        # Expected distinct experts hit when pairs land uniformly at random on this GPU's experts.
        touched = self.experts_on_gpu * (1.0 - np.exp(-pairs / self.experts_on_gpu))
        compute = self.per_pair_compute_ms * pairs + self.per_touched_compute_ms * touched
        memory = self.per_touched_bytes_ms * touched + self.per_pair_bytes_ms * pairs
        return (tokens > 0) * (np.maximum(compute, memory) + self.fixed_ms)


def moe_block(
    *,
    num_layers: float,
    hidden_size: float,
    expert_intermediate: float,
    num_experts: float,
    top_k: float,
    moe_tp: float,
    moe_ep: float,
    weight_bytes_per_param: float,
    peak_tflops: float,
    hbm_gbps: float,
    fit: MoeFit,
) -> MoeBlock:
    expert_params = 3 * hidden_size * expert_intermediate / moe_tp
    per_flop = 1.0 / (flops_per_ms(peak_tflops) * fit.e_max)
    per_byte = 1.0 / (bytes_per_ms(hbm_gbps) * fit.mem_eff)
    busiest = moe_ep**fit.ep_skew  # the busiest GPU's pairs over its even share
    return MoeBlock(
        experts_on_gpu=num_experts / moe_ep,
        pairs_per_token=top_k / moe_ep * busiest,
        per_pair_compute_ms=num_layers * 2 * expert_params * per_flop,
        per_touched_compute_ms=num_layers * 2 * expert_params * fit.x_half * per_flop,
        per_touched_bytes_ms=num_layers * expert_params * weight_bytes_per_param * per_byte,
        per_pair_bytes_ms=num_layers * 2 * hidden_size * ACT_BYTES * per_byte,
        fixed_ms=num_layers * fit.t0_ms,
    )


@dataclass(frozen=True, slots=True)
class MeasuredCurve:
    """A kernel priced by interpolating measured latencies of this very shape.

    Where the measurements cover a model's kernel (its expert geometry and split, or its GEMM
    weight shapes) on its own GPU and backend, they beat any smooth fit (kernel tile steps, split
    effects); linear in tokens between measured counts, the last segment's slope beyond them.
    ``per_layer_ms`` is one layer's latency.
    """

    tokens: tuple[float, ...]
    per_layer_ms: tuple[float, ...]
    num_layers: float

    def _tail_slope(self) -> float:
        (x0, x1), (y0, y1) = self.tokens[-2:], self.per_layer_ms[-2:]
        return (y1 - y0) / (x1 - x0)

    def scalar(self) -> Callable[[float], float]:
        xs, ys, layers = list(self.tokens), list(self.per_layer_ms), self.num_layers
        last_x, last_y, slope = xs[-1], ys[-1], self._tail_slope()
        first_y, find = ys[0], bisect.bisect_right

        def time_ms(tokens: float) -> float:
            if tokens <= 0:
                return 0.0
            if tokens >= last_x:
                return layers * (last_y + slope * (tokens - last_x))
            i = find(xs, tokens)
            if i == 0:
                return layers * first_y
            x0, x1, y0 = xs[i - 1], xs[i], ys[i - 1]
            return layers * (y0 + (ys[i] - y0) * (tokens - x0) / (x1 - x0))

        return time_ms

    def time_ms(self, tokens: Any) -> Any:
        t = np.asarray(tokens, dtype=np.float64)
        inside = np.interp(t, self.tokens, self.per_layer_ms)
        beyond = np.maximum(t - self.tokens[-1], 0.0) * self._tail_slope()
        return (t > 0) * self.num_layers * (inside + beyond)


@dataclass(frozen=True, slots=True)
class Collective:
    """``count`` collectives per pass, each moving ``bytes_per_token * tokens`` on the wire."""

    per_token_ms: float
    fixed_ms: float

    def time_ms(self, tokens: Any) -> Any:
        return (tokens > 0) * (self.per_token_ms * tokens + self.fixed_ms)

    def scalar(self) -> Callable[[float], float]:
        per_token, fixed = self.per_token_ms, self.fixed_ms

        def time_ms(tokens: float) -> float:
            return per_token * tokens + fixed if tokens > 0 else 0.0

        return time_ms


@dataclass(frozen=True, slots=True)
class Network:
    """The links between NVLink domains (nodes), which a collective over more GPUs than one domain
    holds crosses: ``gbps`` per GPU and direction, ``latency_ms`` a crossing.

    ``nccl_latency_ms`` is NCCL's own all-reduce latency inside one domain (None: unmeasured). An
    all-reduce over GPUs of several domains runs NCCL: the engines' custom all-reduce kernels,
    which the in-domain fit prices, need every rank in one domain (TensorRT-LLM's all-reduce op
    marks a group whose ranks span nodes as without P2P and NVLink and falls back to NCCL)."""

    domain_gpus: int
    gbps: float
    latency_ms: float
    nccl_latency_ms: float | None = None

    def domains(self, num_gpus: int) -> int:
        return -(-num_gpus // self.domain_gpus)


def _link(num_gpus: int, link_gbps: float, network: Network | None) -> tuple[float, int]:
    """The bandwidth a collective's bytes move at and how many network levels it spans: NVLink
    inside one domain; across domains every byte at the network's rate (AIConfigurator prices
    them so, and the two-node H100 prefill rows agree, where NCCL's hierarchical split would
    price them 3-7 times cheaper)."""
    if network is None or num_gpus <= network.domain_gpus:
        return link_gbps, 0
    return network.gbps, math.ceil(math.log2(network.domains(num_gpus)))


def _collective(
    count: float, wire_bytes: float, gbps: float, fit: CollectiveFit, latency_ms: float
) -> Collective:
    """``count`` collectives a pass, each moving ``wire_bytes`` a token per GPU at ``gbps`` and
    paying ``latency_ms`` (the fit's latency plus its network crossings)."""
    return Collective(
        per_token_ms=count * wire_bytes / (bytes_per_ms(gbps) * fit.bw_eff),
        fixed_ms=count * latency_ms,
    )


def all_reduce(
    *,
    count: float,
    num_gpus: int,
    bytes_per_token: float,
    link_gbps: float,
    fit: CollectiveFit,
    network: Network | None = None,
) -> Collective:
    """Ring all-reduce: each GPU sends and receives 2(n-1)/n of the message.

    Over GPUs of several NVLink domains (``network``), NCCL's inter-node tree crosses the network
    twice a level (reduce, then broadcast), each crossing ``network.latency_ms`` beyond NCCL's
    in-domain latency where measured (``network.nccl_latency_ms``), else the fit's, which was
    measured inside one node."""
    if num_gpus <= 1 or count == 0:
        return Collective(0.0, 0.0)
    gbps, levels = _link(num_gpus, link_gbps, network)
    latency_ms = fit.latency(num_gpus)
    if network is not None and levels:
        inside_ms = latency_ms if network.nccl_latency_ms is None else network.nccl_latency_ms
        latency_ms = inside_ms + 2 * levels * network.latency_ms
    wire = 2 * (num_gpus - 1) / num_gpus * bytes_per_token
    return _collective(count, wire, gbps, fit, latency_ms)


def unfused_norm(
    *, count: float, bytes_per_token: float, hbm_gbps: float, hbm_efficiency: float, latency_ms: float
) -> Collective:
    """The residual add and RMSNorm that an engine's in-node all-reduce kernel does in the same
    launch, run as a kernel of their own after each of ``count`` NCCL all-reduces a pass: one
    memory-bound launch (``latency_ms``, the chip's fixed kernel latency) reading the reduced
    output and the residual and writing the new residual and the normed activations, four
    activations a token of ``bytes_per_token`` each, at the chip's effective HBM rate."""
    if count == 0:
        return Collective(0.0, 0.0)
    return Collective(
        per_token_ms=count * 4 * bytes_per_token / bytes_per_ms(hbm_gbps * hbm_efficiency),
        fixed_ms=count * latency_ms,
    )


def all_to_all(
    *,
    count: float,
    num_gpus: int,
    bytes_per_token: float,
    link_gbps: float,
    fit: CollectiveFit,
    network: Network | None = None,
) -> Collective:
    """All-to-all: (n-1)/n of each GPU's share leaves it. Over GPUs of several NVLink domains
    (``network``), the share bound for another domain crosses the network once."""
    if num_gpus <= 1 or count == 0:
        return Collective(0.0, 0.0)
    gbps, levels = _link(num_gpus, link_gbps, network)
    crossing_ms = network.latency_ms if network is not None and levels else 0.0
    wire = (num_gpus - 1) / num_gpus * bytes_per_token
    return _collective(count, wire, gbps, fit, fit.latency(num_gpus) + crossing_ms)
