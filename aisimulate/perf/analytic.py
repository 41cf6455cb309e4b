"""The default latency model: calibrated rooflines summed over a worker's layers.

Everything that depends only on (model, system, backend, shape) is folded into a few kernel cost
objects at construction, so a pass estimate is a handful of arithmetic operations and the same
formulas run on numpy arrays for many passes at once.

Conventions: a pass is one attention-DP rank's batch. Its attention, dense GEMMs and
tensor-parallel all-reduces run on the rank's own tokens; its experts run on the tokens of every
rank of the lock-step pass (the MoE kernel's work is the sum of the routed tokens), and the
experts' collectives either on that sum too (a backend that gathers each rank's own count: every
GPU receives the other ranks' tokens) or as if every rank carried as many as the busiest one
(padded gathers; a dispatch that ends with the last sender), as
``BackendProfile.expert_comm_follows_group_sum`` says. ``group_time_ms`` takes those two totals;
``time_ms`` assumes the ranks equally loaded (decode passes, and callers that price one rank
alone). With pipeline parallelism a pass walks through every stage in turn, so its latency is the
sum over stages plus the stage hand-offs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.dtypes import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM, math_dtype
from aisimulate.catalog.models import ModelSpec
from aisimulate.catalog.systems import System
from aisimulate.perf.attention_tables import (
    ATTENTION_TABLES_BY_DEFAULT,
    MLA_GEOMETRY,
    TableContextAttention,
    TableGenerationAttention,
    attention_table_for,
    kv_key,
)
from aisimulate.perf.calibration import (
    GEMM_TABLES_BY_DEFAULT,
    KERNEL_TABLES_BY_DEFAULT,
    Calibration,
    calibration_for,
    moe_curve_key,
    moe_fit_key,
)
from aisimulate.perf.cuda_graphs import padded_batch, padded_batches
from aisimulate.perf.kernel_tables import (
    ALLTOALL_TABLES_BY_DEFAULT,
    allreduce_tables_for,
    alltoall_tables_for,
    gemm_tables_for,
    token_nodes,
)
from aisimulate.perf.kernels import (
    DSA_INDEXER_DECODE_MS,
    DSA_PAST_TOPK_DECODE_MS,
    Collective,
    GenerationAttention,
    LinearAttention,
    LinearAttentionFit,
    MeasuredCurve,
    Network,
    Roofline,
    SparseAttentionFit,
    all_reduce,
    all_to_all,
    context_attention,
    gemm_roofline,
    generation_attention,
    linear_attention,
    mla_context_math,
    moe_block,
    sparse_attention,
    unfused_norm,
)
from aisimulate.perf.memory import (
    attention_params_per_rank,
    check_backend,
    indexer_key_bytes_per_token_layer,
    state_bytes_per_request_per_gpu,
)
from aisimulate.perf.model import (
    BatchArrays,
    BatchShape,
    PassBreakdown,
    SpelledOutDecodeTimes,
    batch_args,
    time_ms_pricer,
)
from aisimulate.perf.moe_tables import moe_curves
from aisimulate.perf.shape import ParallelShape, check_shape, kv_heads_per_rank

_NO_COMM = Collective(0.0, 0.0)
_NO_LINEAR_ATTENTION = LinearAttention(0.0, 0.0, 0.0)
_QK_NORM_BYTES_PER_TOKEN = 2 * 4.0  # one fp32 variance for q and one for k


class AnalyticPerfModel(SpelledOutDecodeTimes):
    """Roofline latency of one engine pass, calibrated against measured kernels."""

    name = "analytic"

    def __init__(
        self,
        model: ModelSpec,
        system: System,
        shape: ParallelShape,
        *,
        backend: str = "vllm",
        kv_cache_dtype: str = "auto",
        nextn: int = 0,
        calibration: Calibration | None = None,
        async_scheduling: bool = False,
        cuda_graph_sizes: tuple[int, ...] = (),
        kernel_tables: bool | None = None,
        moe_a2a_backend: str = "none",
    ) -> None:
        check_backend(backend)
        check_shape(model, shape)
        self.model, self.system, self.shape, self.backend = model, system, shape, backend
        self.kv_dtype = model.resolve_kv_dtype(kv_cache_dtype, backend)
        self.nextn = nextn
        self.calibration = cal = calibration or calibration_for(system, backend)
        self._dp = shape.attention_dp
        self._comm_follows_sum = backend_profile(backend).expert_comm_follows_group_sum
        self._alltoall_needs_nvlink = backend_profile(backend).experts_alltoall_needs_nvlink
        self._allreduce_fuses_norm = backend_profile(backend).allreduce_fuses_norm
        # Measured kernel tables: GEMM tables for the linear layers, the catalog's MoE curves for
        # the experts (None: ``KERNEL_TABLES_BY_DEFAULT``).
        self.kernel_tables = KERNEL_TABLES_BY_DEFAULT if kernel_tables is None else kernel_tables
        # The expert-parallel all-to-all the engine runs (SGLang's --moe-a2a-backend): DeepEP's
        # experts run their own kernels, priced by their own measured curves where there are some.
        self.moe_a2a_backend = moe_a2a_backend
        self._linear, self._lm_head = self._build_gemms(cal)
        self._context, self._generation = self._build_attention(cal)
        self._linear_attention = self._build_linear_attention()
        self._hybrid = model.is_hybrid_linear
        self._moe = self._build_moe(cal)
        self._comm, self._group_comm = self._build_comm(cal)
        self._overhead_base = cal.overhead.base_ms
        self._overhead_per_seq = cal.overhead.per_sequence_ms
        # The fitted overhead is CPU time between synchronous passes; scheduled asynchronously it
        # runs during the previous pass and shows only where it outlasts the kernels.
        self.async_scheduling = async_scheduling
        # CUDA graphs (``cuda_graph_sizes`` ascending; empty: eager): the GEMMs, MoE and collectives
        # of a captured pass run at the next captured size; attention reads the real sequences'
        # KV (padding rows have none) and the framework overhead is per real sequence.
        self.cuda_graph_sizes = cuda_graph_sizes
        self._graph_sizes_array = np.asarray(cuda_graph_sizes, dtype=np.float64)
        self._graph_pads_tokens = backend_profile(backend).cuda_graphs.pads == "tokens"
        # MTP: nextn draft steps, each one MTP module (one decoder layer, its collectives included)
        # and the lm-head. The first step runs over every token the pass verified, the later ones
        # over one token a request (TensorRT-LLM's `MTPEagleWorker.forward`; vLLM's and SGLang's
        # EAGLE-style drafters alike).
        self._mtp_layer_fraction = 1.0 / model.num_layers if nextn else 0.0
        self._bind_scalar()

    # ---- construction --------------------------------------------------------------------
    def _peak(self, storage_dtype: str) -> float:
        return self.system.tflops[math_dtype(storage_dtype, self.system.math_dtypes)]

    def _gemm(
        self,
        cal: Calibration,
        storage_dtype: str,
        params: float,
        act: float,
        kernels: float,
        reduction_k: float = 0.0,
    ) -> Roofline:
        return gemm_roofline(
            weight_params=params,
            act_elems_per_token=act,
            weight_bytes_per_param=WEIGHT_BYTES_PER_PARAM[storage_dtype],
            peak_tflops=self._peak(storage_dtype),
            hbm_gbps=self.system.hbm_gbps,
            fit=cal.gemm_fit(math_dtype(storage_dtype, self.system.math_dtypes), storage_dtype),
            num_kernels=kernels,
            reduction_k=reduction_k,
        )

    def _build_gemms(self, cal: Calibration) -> tuple[Any, Any]:
        """The linear layers of a pass (attention projections, dense MLP, shared experts, MoE
        router) and the lm-head: fitted rooflines, or measured GEMM tables interpolated at the
        model's own weight shapes where the system, backend and weight format have them
        (``kernel_tables``)."""
        m, tp = self.model, self.shape.tp
        h = m.hidden_size
        dtype = m.linear_dtype(expert=False)
        attn_params = attention_params_per_rank(m, tp)
        heads_r = m.num_heads / tp
        attn_act = 2 * h + heads_r * (m.qk_head_dim + m.v_dim) + 2 * kv_heads_per_rank(m, tp) * m.head_dim
        attn_kernels = 5 if m.is_mla else 2
        attn_dtype = m.linear_dtype(expert=False, attention=True)
        attn_shapes = self._attention_gemm_shapes(attn_params)
        attn_k = sum(k for _, k in attn_shapes)
        per_layer_attn = self._gemm(cal, attn_dtype, attn_params, attn_act, attn_kernels, attn_k)
        # (roofline, weight format, one layer's (n, k) GEMMs, layers) of each group.
        parts: list[tuple[Roofline, str, list[tuple[float, float]], float]] = [
            (per_layer_attn, attn_dtype, attn_shapes, m.num_layers)
        ]
        dense_layers = m.num_dense_layers if m.is_moe else m.num_layers
        if dense_layers:
            inter = m.intermediate_size / tp
            mlp = self._gemm(cal, dtype, 3 * h * inter, 2 * h + 3 * inter, 2, h + inter)
            parts.append((mlp, dtype, [(2 * inter, h), (h, inter)], dense_layers))
        if m.num_moe_layers and m.num_shared_experts:
            inter = m.shared_expert_width / tp
            shared = self._gemm(cal, dtype, 3 * h * inter, 2 * h + 3 * inter, 2, h + inter)
            parts.append((shared, dtype, [(2 * inter, h), (h, inter)], m.num_moe_layers))
        if m.num_moe_layers:
            # The router: a bf16 (hidden x experts) GEMM every GPU runs on all its tokens before the
            # experts (AIConfigurator prices it as `router_gemm`; its MoE kernel points exclude it).
            router = self._gemm(cal, "bf16", h * m.num_experts, h + m.num_experts, 1, h)
            parts.append((router, "bf16", [(m.num_experts, h)], m.num_moe_layers))
        linear = parts[0][0].scaled(parts[0][3])
        for roofline, _, _, layers in parts[1:]:
            linear = linear + roofline.scaled(layers)
        vocab = m.vocab_size / tp
        lm_head = self._gemm(cal, m.base_dtype, vocab * h, h + vocab, 1, h)
        if self.kernel_tables:
            return (
                self._tabled(parts, linear),
                self._tabled([(lm_head, m.base_dtype, [(vocab, h)], 1.0)], lm_head),
            )
        if any(dtype in GEMM_TABLES_BY_DEFAULT and self._native_math(dtype) for _, dtype, _, _ in parts):
            return self._tabled(parts, linear, GEMM_TABLES_BY_DEFAULT), lm_head
        return linear, lm_head

    def _attention_gemm_shapes(self, params: float) -> list[tuple[float, float]]:
        """One layer's attention projections as (n, k) GEMMs on one GPU; empty where they do not
        add up to the layer's attention weights (linear-attention mixers: the fit prices them)."""
        m, tp = self.model, self.shape.tp
        h, heads_r = m.hidden_size, m.num_heads / tp
        if m.is_hybrid_linear:
            return []
        shapes: list[tuple[float, float]]
        if m.is_mla:
            q: list[tuple[float, float]] = (
                [(m.q_lora_rank, h), (heads_r * m.qk_head_dim, m.q_lora_rank)] if m.q_lora_rank else []
            )
            shapes = q or [(heads_r * m.qk_head_dim, h)]
            shapes += [
                (m.kv_lora_rank + m.qk_rope_head_dim, h),
                (heads_r * (m.qk_nope_head_dim + m.v_dim), m.kv_lora_rank),
                (h, heads_r * m.v_dim),
            ]
        else:
            qkv = (heads_r + 2 * kv_heads_per_rank(m, tp)) * m.head_dim
            shapes = [(qkv, h), (h, heads_r * m.head_dim)]
        total = sum(n * k for n, k in shapes)
        return shapes if abs(total - params) <= 0.02 * params else []

    def _tabled(
        self,
        parts: list[tuple[Roofline, str, list[tuple[float, float]], float]],
        fitted: Roofline,
        formats: frozenset[str] | None = None,
    ) -> Any:
        """The parts' summed latency at the tables' token counts, as a measured curve: each part
        from its GEMMs' tables where all of them have one (and its format is in ``formats``;
        None: any), else from its fitted roofline."""
        tables = gemm_tables_for(self.system.name, self.backend, backend_profile(self.backend).kernel_backend)
        if not tables:
            return fitted
        nodes = np.asarray(next(iter(tables.values())).m)
        total = np.zeros_like(nodes)
        for roofline, dtype, shapes, layers in parts:
            wanted = formats is None or dtype in formats
            table = tables.get(dtype) if wanted and self._native_math(dtype) else None
            curves = [table.curve_ms(n, k) for n, k in shapes] if table is not None else []
            if curves and all(c is not None for c in curves):
                total = total + layers * sum(c for c in curves if c is not None)
            else:
                total = total + layers * roofline.time_ms(nodes)
        return MeasuredCurve(tuple(nodes.tolist()), tuple(total.tolist()), 1.0)

    def _native_math(self, storage_dtype: str) -> bool:
        """Whether the chip runs the format's own math (a table measured it); weight-only kernels
        (fp4 weights on Hopper) were not measured and keep the fit."""
        math = math_dtype(storage_dtype, self.system.math_dtypes)
        return storage_dtype == "bf16" or math != "bf16"

    def _build_attention(self, cal: Calibration) -> tuple[Any, Any]:
        m, shape = self.model, self.shape
        heads_r = m.num_heads / shape.tp
        kv_elems = m.kv_elements_per_token_per_layer
        if not m.is_mla:
            kv_elems = 2 * kv_heads_per_rank(m, shape.tp) * m.head_dim
        kv_bytes_layer = kv_elems * KV_BYTES_PER_ELEMENT[self.kv_dtype]
        if m.is_mla:
            kv_bytes_layer = m.kv_bytes_per_token_per_layer(self.kv_dtype)
        bf16 = self.system.tflops["bf16"]
        common = dict(
            num_layers=m.num_full_attention_layers,
            num_heads=heads_r,
            kv_bytes_per_token_layer=kv_bytes_layer,
            peak_tflops=bf16,
            hbm_gbps=self.system.hbm_gbps,
            num_sliding_layers=m.num_sliding_layers,
            sliding_window=m.sliding_window,
        )
        context = context_attention(qk_dim=m.qk_head_dim, v_dim=m.v_dim, fit=cal.context_attention, **common)
        mla_fit = cal.context_mla.get(self.kv_dtype) if m.is_mla and not m.is_sparse_attention else None
        if mla_fit is not None:
            # The system's own measured MLA prefill kernel, at the math of its KV cache's format.
            mla_common = {
                **common,
                "peak_tflops": self.system.tflops[mla_context_math(self.kv_dtype, self.system.math_dtypes)],
            }
            context = context_attention(qk_dim=m.qk_head_dim, v_dim=m.v_dim, fit=mla_fit, **mla_common)
        if m.is_mla:
            # Absorbed MLA decode: scores against the latent + rope key, then values in the latent.
            flops = 2 * heads_r * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        else:
            flops = 4 * heads_r * m.head_dim
        generation = generation_attention(
            flops_per_context_token_layer=flops, fit=cal.generation_attention, **common
        )
        if not m.is_sparse_attention:
            return self._measured_attention(context, generation)
        return sparse_attention(
            context=context,
            generation=generation,
            num_layers=m.num_full_attention_layers,
            num_heads=heads_r,
            kv_lora_rank=m.kv_lora_rank,
            qk_rope_head_dim=m.qk_rope_head_dim,
            top_k=m.index_topk,
            index_n_heads=m.index_n_heads,
            index_head_dim=m.index_head_dim,
            indexer_key_bytes_per_token_layer=indexer_key_bytes_per_token_layer(m),
            bf16_tflops=bf16,
            fp8_tflops=self.system.tflops.get("fp8", bf16),
            hbm_gbps=self.system.hbm_gbps,
            fit=SparseAttentionFit(
                past_topk_decode_ms=DSA_PAST_TOPK_DECODE_MS.get(self.backend, 0.0),
                indexer_decode_ms=DSA_INDEXER_DECODE_MS.get(self.backend, 0.0),
            ),
        )

    def _measured_attention(self, context: Any, generation: Any) -> tuple[Any, Any]:
        """The attention phases the measured tables price (``attention_tables``), the fits the
        rest: grouped-query prefill, decode, and MLA of DeepSeek-V3's geometry (the one measured)."""
        m, tp = self.model, self.shape.tp
        kv, heads = kv_key(self.kv_dtype), m.num_heads / tp
        layers = {"num_layers": m.num_full_attention_layers}
        if m.is_mla:
            if (m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) != MLA_GEOMETRY:
                return context, generation
            shapes = {"context_mla": kv, "generation_mla": f"{heads:g}/{kv}"}
        else:
            layers |= {"num_sliding_layers": m.num_sliding_layers, "sliding_window": m.sliding_window}
            shapes = {"context": f"{m.head_dim}/{kv}", "generation": f"{m.head_dim}/{kv}"}
            if m.num_heads < 2 * m.num_kv_heads:
                del shapes["context"]  # multi-head prefill: not in the tables
        kernel_backend = backend_profile(self.backend).kernel_backend
        for phase, shape in shapes.items():
            if not (self.kernel_tables or phase in ATTENTION_TABLES_BY_DEFAULT):
                continue
            table = attention_table_for(self.system.name, self.backend, kernel_backend, phase, shape)
            if table is None:
                continue
            if phase.startswith("context"):
                context = TableContextAttention(table, heads=heads, **layers)
            else:
                kv_heads = 1 if m.is_mla else kv_heads_per_rank(m, tp)
                generation = TableGenerationAttention(table, kv_heads=kv_heads, **layers)
        return context, generation

    def _build_linear_attention(self) -> LinearAttention:
        """Gated DeltaNet layers of a hybrid model (heads split by tp); none for other models."""
        m, tp = self.model, self.shape.tp
        if not m.is_hybrid_linear:
            return _NO_LINEAR_ATTENTION
        per_layer_state = (
            state_bytes_per_request_per_gpu(m, ParallelShape(tp=tp)) / m.num_linear_attention_layers
        )
        return linear_attention(
            num_layers=m.num_linear_attention_layers,
            num_value_heads=m.linear_num_value_heads / tp,
            key_head_dim=m.linear_key_head_dim,
            value_head_dim=m.linear_value_head_dim,
            state_bytes_per_layer=per_layer_state,
            bf16_tflops=self.system.tflops["bf16"],
            hbm_gbps=self.system.hbm_gbps,
            fit=LinearAttentionFit(),
        )

    def _build_moe(self, cal: Calibration) -> Any:
        """Measured latencies of the model's exact expert kernel where there are some, else the
        fitted roofline."""
        m = self.model
        if not m.is_moe:
            return None
        moe_tp, moe_ep = self.shape.expert_split
        profile = backend_profile(self.backend)
        dtype = profile.expert_kernel_format(m.linear_dtype(expert=True), self.system.sm_version)
        curves = moe_curves(cal, self.system.name, self.backend, self.kernel_tables)
        geometry = (m.hidden_size, m.moe_intermediate_size, m.experts_per_token, m.num_experts)
        curve = curves.get(moe_curve_key(dtype, *geometry, moe_tp, moe_ep))
        if self.moe_a2a_backend != "none" and moe_ep > 1:
            # The all-to-all path's own expert kernels (SGLang's DeepEP: DeepGEMM grouped GEMMs on
            # the dispatched tokens, dispatch and combine not included: ``_build_comm`` prices
            # them); a split they were not measured at keeps the default kernel's price.
            curve = curves.get(moe_curve_key(dtype, *geometry, moe_tp, moe_ep, self.moe_a2a_backend), curve)
        fit_key = moe_fit_key(dtype, math_dtype(dtype, self.system.math_dtypes))
        unsplit = moe_curve_key(dtype, *geometry, 1, 1)
        if curve is None and moe_tp > 1 and fit_key not in cal.moe and not _any_tensor_split(curves, unsplit):
            # A format with no fit of its own whose kernel was measured under expert parallelism
            # only (TRT-LLM's W4A8 MXFP4 experts): a tensor split over the same GPUs reads and
            # computes as much per GPU.
            curve = curves.get(moe_curve_key(dtype, *geometry, 1, moe_tp * moe_ep))
        weight_bound_tokens = profile.expert_parallel_price_up_to_tokens(dtype, self.system.sm_version)
        expert_parallel = curves.get(moe_curve_key(dtype, *geometry, 1, moe_tp * moe_ep))
        if moe_tp > 1 and weight_bound_tokens and expert_parallel is not None:
            # The backend's tensor-split kernel is not the one measured at this split (TRT-LLM's
            # own FP8-block MoE backend on Blackwell, measured only as DeepGEMM): while the layer
            # is bound by its weights it reads as many bytes a GPU as an expert split of the same
            # GPUs; beyond, the measured tensor split.
            curve = _spliced(expert_parallel, curve, weight_bound_tokens)
        if curve is None and dtype not in cal.moe:
            # A format with no fit of its own (it borrows its math dtype's) not measured at this
            # expert count either (TRT-LLM's low-latency NVFP4 kernel, which its Kimi-K2.5
            # recipes run, measured at DeepSeek's 256 experts, not Kimi's 384): the same experts
            # under the same split at another count. A token's pairs and an expert's bytes are
            # the same; only how many distinct experts a batch touches differs, so the borrowed
            # curve is exact at a few tokens and once compute-bound, low in between.
            curve = _other_expert_count(curves, dtype, geometry, moe_tp, moe_ep)
        if curve is not None:
            tokens, per_layer_ms = curve
            return MeasuredCurve(tokens, per_layer_ms, m.num_moe_layers)
        return moe_block(
            num_layers=m.num_moe_layers,
            hidden_size=m.hidden_size,
            expert_intermediate=m.moe_intermediate_size,
            num_experts=m.num_experts,
            top_k=m.experts_per_token,
            moe_tp=moe_tp,
            moe_ep=moe_ep,
            weight_bytes_per_param=WEIGHT_BYTES_PER_PARAM[dtype],
            peak_tflops=self._peak(dtype),
            hbm_gbps=self.system.hbm_gbps,
            fit=cal.moe_fit(dtype, math_dtype(dtype, self.system.math_dtypes)),
        )

    @property
    def _network(self) -> Network:
        """The network a collective over more GPUs than one NVLink domain crosses."""
        return Network(
            domain_gpus=self.system.nvlink_domain,
            gbps=self.system.inter_node_gbps,
            latency_ms=self.system.p2p_latency_us / 1000,
            nccl_latency_ms=None if (nccl_us := self.system.nccl_latency_us) is None else nccl_us / 1000,
        )

    def _link_gbps(self, num_gpus: int) -> float:
        return (
            self.system.nvlink_gbps if num_gpus <= self.system.nvlink_domain else self.system.inter_node_gbps
        )

    def _ring_all_reduce(
        self, cal: Calibration, count: int, num_gpus: int, bytes_per_token: float
    ) -> Collective:
        """``count`` all-reduces a pass over ``num_gpus`` GPUs, priced by the calibrated fit on
        the link those GPUs share."""
        return all_reduce(
            count=count,
            num_gpus=num_gpus,
            bytes_per_token=bytes_per_token,
            link_gbps=self.system.nvlink_gbps,
            fit=cal.allreduce,
            network=self._network,
        )

    def _build_comm(self, cal: Calibration) -> tuple[Any, Collective | MeasuredCurve]:
        """The collectives of a pass on the rank's own tokens, folded into one cost linear in
        them (with ``kernel_tables``, one measured curve: the all-reduces from their tables), and
        the experts' all-to-all (or gather and reduce) in the attention-DP group's tokens."""
        m, shape = self.model, self.shape
        tp, stage = shape.tp, shape.gpus_per_stage
        token_bytes = m.hidden_size * 2.0
        _, moe_ep = shape.expert_split
        # TP all-reduce after attention and after the MLP (dense or experts) of every layer.
        tp_count = 2 * m.num_layers if tp > 1 else 0
        # TensorRT-LLM gathers instead where no all-to-all of its own can run (no more expert
        # ranks than a token's experts, or ranks beyond one NVLink domain).
        gathers = self._alltoall_needs_nvlink and (
            moe_ep <= m.experts_per_token or stage > self.system.nvlink_domain
        )
        if m.is_moe and stage > 1 and self._dp > 1 and moe_ep > 1 and not gathers:
            # Dispatch and combine of every MoE layer, each GPU sending its share of the group's
            # tokens. Without attention DP every GPU already holds every token: experts split over
            # GPUs sum their outputs with the same all-reduce a tensor-split MLP does.
            moe_comm: Collective | MeasuredCurve = all_to_all(
                count=2 * m.num_moe_layers,
                num_gpus=stage,
                bytes_per_token=token_bytes * m.experts_per_token / stage,
                link_gbps=self.system.nvlink_gbps,
                fit=cal.alltoall,
                network=self._network,
            )
            measured = alltoall_tables_for(self.system.name).get(stage)
            if measured is not None and (self.kernel_tables or ALLTOALL_TABLES_BY_DEFAULT):
                # NCCL's measured all-to-all at each GPU's send buffer, at the tables' token counts.
                nodes = np.asarray(token_nodes())
                sent_ms = (
                    2 * m.num_moe_layers * measured.time_ms(nodes * token_bytes * m.experts_per_token / stage)
                )
                moe_comm = MeasuredCurve(tuple(nodes.tolist()), tuple(sent_ms.tolist()), 1.0)
            tp_count = m.num_layers if tp > 1 else 0
        elif m.is_moe and stage > 1 and self._dp > 1:
            # Attention DP with tensor-split experts (no expert parallelism): nothing is
            # dispatched. Every layer gathers the group's tokens to the tensor-split MLP (experts
            # or dense) and reduces its output back (SGLang's padded all-gather and
            # reduce-scatter): two collectives a layer that together move the bytes of one ring
            # all-reduce of the gathered tokens, not two all-to-alls. TensorRT-LLM's fallback
            # from the all-to-all does the same around its MoE layers only.
            layers = m.num_moe_layers if moe_ep > 1 else m.num_layers
            gathered = self._ring_all_reduce(cal, layers, stage, token_bytes)
            moe_comm = Collective(per_token_ms=gathered.per_token_ms, fixed_ms=2 * gathered.fixed_ms)
            tp_count = m.num_layers if tp > 1 else 0
        else:
            moe_comm = _NO_COMM
        tp_comm = self._ring_all_reduce(cal, tp_count, tp, token_bytes)
        if self._allreduce_fuses_norm and tp > self.system.nvlink_domain:
            # Across nodes the all-reduce is NCCL's, and the residual add and RMSNorm the
            # engine's own kernel fuses into it run after it as a kernel of their own.
            norm = unfused_norm(
                count=tp_count,
                bytes_per_token=token_bytes,
                hbm_gbps=self.system.hbm_gbps,
                hbm_efficiency=self.system.hbm_efficiency,
                latency_ms=self.system.mem_latency_us / 1000,
            )
            tp_comm = Collective(tp_comm.per_token_ms + norm.per_token_ms, tp_comm.fixed_ms + norm.fixed_ms)
        # QK norm over all heads: one all-reduce a layer of each token's fp32 q and k variances
        # (vLLM's `MiniMaxText01RMSNormTP.forward_qk`); latency-bound at any batch.
        norm_count = m.num_layers if tp > 1 and m.qk_norm_across_heads else 0
        norm_comm = self._ring_all_reduce(cal, norm_count, tp, _QK_NORM_BYTES_PER_TOKEN)
        if shape.pp > 1:
            link = self._link_gbps(shape.num_gpus)
            pp_comm = Collective(
                per_token_ms=(shape.pp - 1) * token_bytes / (link * 1e6),
                fixed_ms=(shape.pp - 1) * self.system.p2p_latency_us / 1000,
            )
        else:
            pp_comm = _NO_COMM
        fitted = Collective(
            per_token_ms=tp_comm.per_token_ms + norm_comm.per_token_ms + pp_comm.per_token_ms,
            fixed_ms=tp_comm.fixed_ms + norm_comm.fixed_ms + pp_comm.fixed_ms,
        )
        kernel_backend = backend_profile(self.backend).kernel_backend
        table = allreduce_tables_for(self.system.name, self.backend, kernel_backend).get(tp)
        if not self.kernel_tables or not tp_count or table is None:
            return fitted, moe_comm
        # The tensor-parallel all-reduces from the measured table, at the tables' token counts;
        # the pipeline hand-offs as fitted.
        nodes = np.asarray(token_nodes())
        rest = pp_comm
        total = (
            tp_count * table.time_ms(nodes * token_bytes)
            + norm_count * table.time_ms(nodes * _QK_NORM_BYTES_PER_TOKEN)
            + rest.time_ms(nodes)
        )
        return MeasuredCurve(tuple(nodes.tolist()), tuple(total.tolist()), 1.0), moe_comm

    # ---- evaluation ----------------------------------------------------------------------
    def _bind_scalar(self) -> None:
        self._s_linear = self._linear.scalar()
        self._s_lm_head = self._lm_head.scalar()
        self._s_context = self._context.scalar()
        self._s_generation = self._generation.scalar()
        self._s_linear_attention = self._linear_attention.scalar()
        self._s_moe = self._moe.scalar() if self._moe is not None else None
        self._s_comm = self._comm.scalar()
        self._s_group_comm = self._group_comm.scalar()

    def _scalar_components(
        self,
        p: float,
        r: float,
        pairs: float,
        ctx: float,
        d: float,
        dctx: float,
        tps: float,
        *,
        group: float = 0.0,
        busiest: float = 0.0,
    ) -> tuple[float, float, float, float, float]:
        """The pass's parts; ``group``/``busiest`` as in ``group_time_ms`` (0: ranks equally
        loaded)."""
        m = p + d * tps
        if m <= 0:
            return 0.0, 0.0, 0.0, 0.0, 0.0
        graphed = m
        if self.cuda_graph_sizes:
            if self._graph_pads_tokens:
                graphed = padded_batch(m, self.cuda_graph_sizes)
            elif p == 0:
                graphed = padded_batch(d, self.cuda_graph_sizes) * tps
        if group:  # the other ranks' tokens as they carry them, this rank's as its kernels run
            experts = group - m + graphed
            if self._comm_follows_sum:
                sent = experts
            else:
                sent = self._dp * (busiest if busiest > graphed else graphed)
        else:
            experts = sent = graphed * self._dp
        gemm = self._s_linear(graphed) + self._s_lm_head(r + d * tps)
        attention = self._s_context(pairs, r, ctx, p) + self._s_generation(d, dctx, tps)
        if self._hybrid:
            attention += self._s_linear_attention(p, d * tps)
        moe = self._s_moe(experts) if self._s_moe is not None else 0.0
        overhead = self._overhead_base + self._overhead_per_seq * (r + d)
        comm = self._s_comm(graphed) + self._s_group_comm(sent)
        if self._mtp_layer_fraction and d > 0:
            g, a, e, c = self._s_draft_layer(d * tps, d, dctx, tps)
            if self.nextn > 1:
                later = self._s_draft_layer(d, d, dctx, 1.0)
                g += (self.nextn - 1) * later[0]
                a += (self.nextn - 1) * later[1]
                e += (self.nextn - 1) * later[2]
                c += (self.nextn - 1) * later[3]
            f = self._mtp_layer_fraction
            gemm += f * g + self.nextn * self._s_lm_head(d)
            attention += f * a
            moe += f * e
            comm += f * c
        return gemm, attention, moe, comm, overhead

    def _s_draft_layer(
        self, tokens: float, d: float, dctx: float, tps: float
    ) -> tuple[float, float, float, float]:
        """All layers' GEMMs, attention, experts and collectives at one draft step's ``tokens``
        (``d`` requests of ``tps`` query tokens each); the MTP layer is ``_mtp_layer_fraction`` of
        them."""
        moe = self._s_moe(tokens * self._dp) if self._s_moe is not None else 0.0
        comm = self._s_comm(tokens) + self._s_group_comm(tokens * self._dp)
        return self._s_linear(tokens), self._s_generation(d, dctx, tps), moe, comm

    def _vector_components(
        self, p: Any, r: Any, pairs: Any, ctx: Any, d: Any, dctx: Any, tps: float
    ) -> list[Any]:
        m = p + d * tps
        graphed = self._graphed_tokens(p, d, tps, m)
        gemm = self._linear.time_ms(graphed) + self._lm_head.time_ms(r + d * tps)
        attention = self._context.time_ms(pairs, r, ctx, p) + self._generation.time_ms(d, dctx, tps)
        attention = attention + self._linear_attention.time_ms(p, d * tps)
        moe = self._moe.time_ms(graphed * self._dp) if self._moe is not None else 0.0
        overhead = (m > 0) * (self._overhead_base + self._overhead_per_seq * (r + d))
        comm = self._comm.time_ms(graphed) + self._group_comm.time_ms(graphed * self._dp)
        if self._mtp_layer_fraction:
            g, a, e, c = self._vector_draft_layer(d * tps, d, dctx, tps)
            if self.nextn > 1:
                later = self._vector_draft_layer(d, d, dctx, 1.0)
                g = g + (self.nextn - 1) * later[0]
                a = a + (self.nextn - 1) * later[1]
                e = e + (self.nextn - 1) * later[2]
                c = c + (self.nextn - 1) * later[3]
            f = self._mtp_layer_fraction
            gemm = gemm + (f * g + self.nextn * self._lm_head.time_ms(d))
            attention = attention + f * a
            moe = moe + f * e
            comm = comm + f * c
        return [gemm, attention, moe, comm, overhead]

    def _vector_draft_layer(self, tokens: Any, d: Any, dctx: Any, tps: float) -> tuple[Any, Any, Any, Any]:
        """``_s_draft_layer`` over arrays of passes (a pass without decodes drafts nothing)."""
        drafts = d > 0
        moe = self._moe.time_ms(tokens * self._dp) if self._moe is not None else 0.0
        comm = self._comm.time_ms(tokens) + self._group_comm.time_ms(tokens * self._dp)
        return (
            drafts * self._linear.time_ms(tokens),
            drafts * self._generation.time_ms(d, dctx, tps),
            drafts * moe,
            drafts * comm,
        )

    def _graphed_tokens(self, p: Any, d: Any, tps: float, m: Any) -> Any:
        """The tokens the weight-bound kernels of many passes run at (see ``_scalar_components``)."""
        if not self.cuda_graph_sizes:
            return m
        if self._graph_pads_tokens:
            return padded_batches(m, self._graph_sizes_array)
        return np.where(p == 0, padded_batches(d, self._graph_sizes_array) * tps, m)

    def time_ms(
        self,
        prefill_tokens: float,
        prefill_requests: float,
        attention_pairs: float,
        prefill_context_tokens: float,
        decode_requests: float,
        decode_context_tokens: float,
        tokens_per_step: float = 1.0,
        active_kv_tokens: float = 0.0,
        kv_capacity_tokens: float = 0.0,
    ) -> float:
        return self._pass_ms(
            *self._scalar_components(
                prefill_tokens,
                prefill_requests,
                attention_pairs,
                prefill_context_tokens,
                decode_requests,
                decode_context_tokens,
                tokens_per_step,
            )
        )

    def group_time_ms(
        self, pass_args: tuple[float, ...], group_tokens: float, busiest_rank_tokens: float
    ) -> float:
        return self._pass_ms(
            *self._scalar_components(*pass_args[:7], group=group_tokens, busiest=busiest_rank_tokens)
        )

    def _pass_ms(self, g: float, a: float, moe: float, c: float, o: float) -> float:
        kernels = g + a + moe + c
        if self.async_scheduling:
            return kernels if kernels > o else o
        return kernels + o

    def decode_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[float], float]:
        if self._mtp_layer_fraction:
            # The draft layers' attention grows with the context too: nothing simple to bind.
            return time_ms_pricer(self, decode_requests, tokens_per_step, kv_capacity_tokens)
        d, tps = decode_requests, tokens_per_step
        # Only the generation attention reads the context (the linear-attention layers' decode
        # cost does not); the sums keep time_ms's order.
        gemm, _, moe, comm, overhead = self._scalar_components(0, 0, 0.0, 0, d, 0, tps)
        state = self._s_linear_attention(0, d * tps)
        generation = self._s_generation
        if self.async_scheduling:

            def overlapped(ctx: float) -> float:
                kernels = gemm + (generation(d, ctx, tps) + state) + moe + comm
                return kernels if kernels > overhead else overhead

            return overlapped
        return lambda ctx: gemm + (generation(d, ctx, tps) + state) + moe + comm + overhead

    def decode_line(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> tuple[float, float] | None:
        generation = self._generation
        if not isinstance(generation, GenerationAttention):
            return None  # sparse attention reads a capped number of context tokens
        memory = generation.per_context_token_mem_ms
        compute = generation.per_context_token_compute_ms * tokens_per_step
        # Generation attention without a sliding window is the only term that reads the context,
        # memory- or compute-bound at every context unless the two nearly tie (a margin well
        # above rounding); the draft layers (MTP) and an overlapped overhead (async) bend it.
        if (
            self._mtp_layer_fraction
            or self.async_scheduling
            or generation.sliding_per_token_ms
            or abs(compute - memory) <= 1e-9 * max(compute, memory)
            or decode_requests <= 0
        ):
            return None
        per_token = max(memory, compute)
        d, tps = decode_requests, tokens_per_step
        gemm, _, moe, comm, overhead = self._scalar_components(0, 0, 0.0, 0, d, 0, tps)
        state = self._s_linear_attention(0, d * tps)
        per_pass = generation.per_sequence_ms * d + generation.fixed_ms
        return gemm + per_pass + state + moe + comm + overhead, per_token

    def decode_times_ms(
        self,
        decode_requests: float,
        tokens_per_step: float,
        kv_capacity_tokens: float,
        context_tokens: np.ndarray,
    ) -> np.ndarray:
        d, tps = decode_requests, tokens_per_step
        if self._mtp_layer_fraction:  # the draft layers' attention: passes spelled out
            return super().decode_times_ms(d, tps, kv_capacity_tokens, context_tokens)
        # Everything but the generation attention is one number for the whole stretch; the sums
        # keep pass_times_ms's order, so the prices are the same to the last bit.
        gemm, _, moe, comm, overhead = self._scalar_components(0, 0, 0.0, 0, d, 0, tps)
        contexts = np.asarray(context_tokens, dtype=np.float64)
        attention = self._generation.over_contexts(d, contexts, tps)
        attention += self._s_linear_attention(0, d * tps)
        kernels: np.ndarray = gemm + attention
        kernels += moe
        kernels += comm
        if self.async_scheduling:
            np.maximum(kernels, overhead, out=kernels)
        else:
            kernels += overhead
        return kernels

    def explain(self, batch: BatchShape) -> PassBreakdown:
        """Components of one pass; under async scheduling ``overhead_ms`` is the visible part."""
        g, a, moe, c, o = self._scalar_components(
            *batch_args(batch)[:7], group=batch.group_tokens, busiest=batch.busiest_rank_tokens
        )
        if self.async_scheduling:
            o = max(0.0, o - (g + a + moe + c))
        return PassBreakdown(gemm_ms=g, attention_ms=a, moe_ms=moe, comm_ms=c, overhead_ms=o)

    def pass_times_ms(self, batches: BatchArrays) -> np.ndarray:
        p, r, pairs, ctx, d, dctx, _ = batches.filled()
        *kernel_parts, overhead = self._vector_components(p, r, pairs, ctx, d, dctx, batches.tokens_per_step)
        kernels = sum(kernel_parts)
        total = np.maximum(kernels, overhead) if self.async_scheduling else kernels + overhead
        times: np.ndarray = np.asarray(total, dtype=np.float64) * np.ones_like(d)
        return times

    def describe(self) -> dict[str, Any]:
        return {
            "provider": self.name,
            "model": self.model.name,
            "system": self.system.name,
            "backend": self.backend,
            "shape": self.shape.describe(moe=self.model.is_moe),
            "kv_cache_dtype": self.kv_dtype,
            "calibration": self.calibration.source,
            "async_scheduling": self.async_scheduling,
            "cuda_graph_max_batch_size": self.cuda_graph_sizes[-1] if self.cuda_graph_sizes else 0,
            "kernel_tables": self.kernel_tables,
            "moe_a2a_backend": self.moe_a2a_backend,
            "layers_per_stage": math.ceil(self.model.num_layers / self.shape.pp),
        }


def _other_expert_count(
    curves: dict[str, Any], dtype: str, geometry: tuple[int, int, int, int], moe_tp: int, moe_ep: int
) -> Any:
    """The measured curve of ``geometry``'s experts (hidden, intermediate, top-k) under the split
    ``moe_tp``/``moe_ep`` at the expert count nearest its own (by ratio, the larger on a tie),
    capped by that count's narrower expert splits, or None."""
    hidden, inter, top_k, num_experts = geometry
    counts = [
        n
        for n in range(top_k, 4 * num_experts + 1)
        if n != num_experts and moe_curve_key(dtype, hidden, inter, top_k, n, moe_tp, moe_ep) in curves
    ]
    if not counts:
        return None
    nearest = min(counts, key=lambda n: (abs(math.log(n / num_experts)), -n))
    tokens, per_layer_ms = curves[moe_curve_key(dtype, hidden, inter, top_k, nearest, moe_tp, moe_ep)]
    # Spreading the same experts over more GPUs never gives one GPU more to read or compute, but
    # the borrowed measurement is not monotone in the split at a few tokens (TRT-LLM's low-latency
    # NVFP4 kernel at DeepSeek's 256 experts on GB200: 0.036 ms a layer at one token under EP8,
    # 0.021 under EP4 and EP16, both power-law routings): each point is capped by the smaller
    # expert splits of the same kernel, so a borrowed split is never priced above a narrower one.
    for ep in range(1, moe_ep):
        narrower = curves.get(moe_curve_key(dtype, hidden, inter, top_k, nearest, moe_tp, ep))
        if narrower is not None:
            per_layer_ms = np.minimum(per_layer_ms, np.interp(tokens, *narrower))
    return tokens, tuple(float(ms) for ms in per_layer_ms)


def _spliced(
    low: tuple[tuple[float, ...], tuple[float, ...]],
    high: tuple[tuple[float, ...], tuple[float, ...]] | None,
    up_to_tokens: int,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The curve ``low`` at token counts up to ``up_to_tokens`` and ``high`` beyond (linear in
    between, as any measured curve): ``low`` alone where ``high`` is None."""
    if high is None:
        return low
    points = [(t, ms) for t, ms in zip(*low, strict=True) if t <= up_to_tokens]
    points += [(t, ms) for t, ms in zip(*high, strict=True) if t > up_to_tokens]
    tokens, per_layer_ms = zip(*points, strict=True)
    return tuple(tokens), tuple(per_layer_ms)


def _any_tensor_split(curves: dict[str, Any], unsplit_key: str) -> bool:
    """Whether any measured curve of the shape ``unsplit_key`` names (``.../tp1ep1``) splits its
    experts by tensor parallelism."""
    stem = unsplit_key.removesuffix("tp1ep1")
    return any(k.startswith(stem) and not k.startswith(f"{stem}tp1ep") for k in curves)
