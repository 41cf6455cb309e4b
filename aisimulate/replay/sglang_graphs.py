"""What SGLang's piecewise CUDA graph for extend passes costs an MLA model on Blackwell.

SGLang 0.5.10 runs extend passes of up to ``--piecewise-cuda-graph-max-tokens`` tokens in a
piecewise CUDA graph by default (the switch became ``--disable-piecewise-cuda-graph`` in that
release; the maximum defaults to the chunked-prefill size, sglang PR #15700). Inside the graph a
DeepSeek-style model's attention must take the absorbed (MLA) form, and ``trtllm_mla`` (SGLang's
attention backend for these models on SM100 and later) has no kernel for an absorbed extend of
ragged prompts: it hands the pass to FlashInfer's paged-MLA implementation, which attends with
576-wide keys and 512-wide values on every head instead of TRT-LLM's ragged prefill kernel
(192/128), at a small fraction of the GPU's rate (sglang PRs #28053, which took DeepSeek on
``trtllm_mla`` out of the prefill graph in June 2026 for that regression, #32782 and #32785).
Outside the graph, and for every other model, backend or GPU, the extend pass is what the perf
model prices. The later releases' fallback also casts the layer's whole FP8 KV pool to bf16 each
pass (#32782); the 0.5.10 rows leave no room for it (docs/fidelity.md), so it is not priced.

SGLang keeps the graph off with attention data parallelism, pipeline parallelism, DeepEP's
all-to-all and on disaggregated prefill servers, so those engines pay nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.models import ModelSpec
from aisimulate.catalog.systems import System
from aisimulate.replay.plan import EngineSpec


@dataclass(frozen=True, slots=True)
class GraphedMlaPrefill:
    """The extra cost of an extend pass that runs in the graph: the absorbed attention, per
    causal attention pair of its chunks."""

    max_tokens: int
    ms_per_pair: float

    def extra_ms(self, tokens: int, pairs: float) -> float:
        """What an extend pass of ``tokens`` prompt tokens and ``pairs`` causal pairs adds."""
        if tokens > self.max_tokens:
            return 0.0  # larger than every captured size: it runs eagerly, priced as it is
        return pairs * self.ms_per_pair


def graphed_mla_prefill(
    backend: str, spec: EngineSpec, model: ModelSpec, system: System, *, role: str
) -> GraphedMlaPrefill | None:
    """The graph's extra cost for one rank of this engine, or None where its extend passes run
    eagerly on TRT-LLM's ragged kernel (or the model has no MLA, or the GPU is not a Blackwell)."""
    max_tokens = spec.sglang.piecewise_cuda_graph_max_tokens
    if (
        backend != "sglang"
        or max_tokens <= 0
        or not model.is_mla
        or model.is_sparse_attention  # DSA models run SGLang's nsa backend, not trtllm_mla
        or system.sm_version < 100
        or role != "agg"
        or spec.attention_dp > 1
        or spec.pp > 1
        or spec.sglang.moe_a2a_backend != "none"
    ):
        return None
    # Per head and pair: the 576-wide key dot product and the 512-wide value accumulation, two
    # FLOPs a multiply-add, at the rate the fallback kernel reaches.
    heads = model.num_heads / spec.tp
    flops_per_pair = 2.0 * heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
    tflops = backend_profile(backend).graphed_mla_attention_efficiency * system.tflops["bf16"]
    return GraphedMlaPrefill(
        max_tokens=max_tokens,
        ms_per_pair=model.num_full_attention_layers * flops_per_pair / (tflops * 1e9),
    )
