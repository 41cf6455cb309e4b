"""Engine settings InferenceX's multi-node SGLang GB200 and GB300 DeepSeek runs launched with,
beyond the split and worker counts their rows or configs give.

Every launch script and recipe of those runs (Dynamo's
``examples/backends/sglang/slurm_jobs/scripts/gb200-fp{4,8}/disagg/*.sh`` for the December 2025
configs, the ``recipes/gb200-fp{4,8}/{1k1k,8k1k}/*.yaml`` of NVIDIA/srt-slurm for the later ones;
for GB300, the ``recipes/gb300-fp{4,8}/...`` of srt-slurm's ``sa-submission-q2-2026`` branch that
InferenceX's ``dsr1-fp{4,8}-gb300-dynamo-sglang`` configs launch, same image as GB200's v0.5.8)
runs TensorRT-LLM's MLA kernels with an FP8 KV cache (``--attention-backend trtllm_mla
--kv-cache-dtype fp8_e4m3``): half the KV bytes per token of SGLang's default (the model's
activation dtype), so twice the tokens in the same memory. Their tensor-parallel (low-latency)
workers also raise ``--mem-fraction-static`` to 0.95, where SGLang's own default
(``perf.memory.sglang_default_memory_fraction``) would leave a TP4 FP8 DeepSeek worker room for
fewer sequences than the rows ran (16-32 of 2k tokens a worker). Their attention-DP workers
set 0.75-0.82, below what the default already gives them; they keep the default. Their
attention-DP workers with experts over every GPU exchange tokens with DeepEP
(``--moe-a2a-backend deepep``; the decode workers ``--deepep-mode low_latency``, the prefill ones
its normal mode). (GB300's recipes were read for the KV cache, DeepEP and the attention-DP
workers' fractions; at 277 GiB a GPU its low-latency workers hold their rows' sequences at
either memory fraction.)

The single-node B300 DeepSeek recipes (``SINGLE_NODE_RECIPES``) set the same KV format, their
memory fraction and prefill budgets, and ran a release whose extend passes went through the
piecewise CUDA graph (``replay.sglang_graphs``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from aisimulate.fidelity.client import INFERENCEX, client_of

if TYPE_CHECKING:
    from aisimulate.fidelity.measured import MeasuredRow, RecordedWorkers

KV_CACHE_DTYPE = "fp8"  # --kv-cache-dtype fp8_e4m3
TENSOR_PARALLEL_MEMORY_FRACTION = 0.95  # --mem-fraction-static of the low-latency workers
SYSTEMS = frozenset({"gb200", "gb300"})  # the systems whose recipes were read


def sglang_recipe_engine(row: MeasuredRow, shape: RecordedWorkers) -> dict[str, object]:
    """The engine fields a disaggregated InferenceX SGLang row on these systems ran with ({}
    for any other row)."""
    if not (
        row.backend == "sglang"
        and row.mode == "disagg"
        and row.system in SYSTEMS
        and client_of(row) is INFERENCEX
    ):
        return {}
    fields: dict[str, object] = {"kv_cache_dtype": KV_CACHE_DTYPE}
    if shape.attn_dp == 1:
        fields["gpu_memory_utilization"] = TENSOR_PARALLEL_MEMORY_FRACTION
    return fields


def sglang_recipe_moe_a2a_backend(row: MeasuredRow, shape: RecordedWorkers) -> str:
    """The expert-parallel all-to-all a role of such a row ran: DeepEP for its attention-DP
    workers with expert parallelism, SGLang's default ("none") for any other worker or row."""
    wide = shape.attn_dp > 1 and shape.moe_ep > 1
    return "deepep" if wide and sglang_recipe_engine(row, shape) else "none"


# InferenceX's single-node SGLang DeepSeek recipes on B300 (``benchmarks/single_node/
# dsr1_fp4_b300.sh`` and ``dsr1_fp8_b300.sh``, the B200 recipes reused), by the checkpoint that
# ran and its TP size: ``--mem-fraction-static``, ``--chunked-prefill-size`` and
# ``--max-prefill-tokens`` (the FP4 recipe leaves the last at SGLang's 16384). Both run
# ``--kv-cache-dtype fp8_e4m3 --attention-backend trtllm_mla`` and none turns the piecewise
# CUDA graph off. Its results database writes the runs under DeepSeek-V3 names too.
@dataclass(frozen=True, slots=True)
class SingleNodeRecipe:
    memory_fraction: float
    chunked_prefill_size: int
    max_prefill_tokens: int


_DSR1_FP4_B300 = {tp: SingleNodeRecipe(0.85, 16384, 16384) for tp in (4, 8)}
_DSR1_FP8_B300 = {8: SingleNodeRecipe(0.82, 32768, 32768), 4: SingleNodeRecipe(0.95, 8192, 8192)}
SINGLE_NODE_RECIPES: dict[tuple[str, str], dict[int, SingleNodeRecipe]] = {
    ("nvidia/DeepSeek-V3-0324-FP4", "b300_sxm"): _DSR1_FP4_B300,
    ("nvidia/DeepSeek-R1-0528-FP4", "b300_sxm"): _DSR1_FP4_B300,
    ("deepseek-ai/DeepSeek-V3", "b300_sxm"): _DSR1_FP8_B300,
    ("deepseek-ai/DeepSeek-R1", "b300_sxm"): _DSR1_FP8_B300,
}
# SGLang runs extend passes in a piecewise CUDA graph by default from 0.5.10 on (AIConfigurator's
# collectors: ``enable_piecewise_cuda_graph`` off up to 0.5.9, ``disable_piecewise_cuda_graph``
# off from 0.5.10), up to its chunked-prefill size (sglang PR #15700); DeepSeek on ``trtllm_mla``
# left the graph with sglang PR #28053, merged on this day. A release measured before it
# cannot hold the change; a 0.5.10 image holds the graph whenever it was measured.
PIECEWISE_GRAPH_DEFAULT_SINCE = (0, 5, 10)
TRTLLM_MLA_LEFT_THE_GRAPH = date(2026, 6, 12)


def _graphs_extend_passes(row: MeasuredRow) -> bool:
    """Whether the row's SGLang release ran extend passes in the piecewise graph by default."""
    release = re.match(r"v?(\d+)\.(\d+)\.(\d+)", row.backend_version)
    if release is None:
        return False
    version = (int(release[1]), int(release[2]), int(release[3]))
    if version == PIECEWISE_GRAPH_DEFAULT_SINCE:
        return True
    measured_before = row.measured_on is not None and row.measured_on < TRTLLM_MLA_LEFT_THE_GRAPH
    return version > PIECEWISE_GRAPH_DEFAULT_SINCE and measured_before


def sglang_single_node_recipe(
    row: MeasuredRow, checkpoint: str, shape: RecordedWorkers
) -> tuple[dict[str, object], dict[str, int]]:
    """The engine fields and the SGLang options an aggregated InferenceX row on these systems
    ran with (({}, {}) for any other row)."""
    recipes = SINGLE_NODE_RECIPES.get((checkpoint, row.system), {})
    recipe = recipes.get(shape.tp)
    if recipe is None or row.backend != "sglang" or row.mode != "agg" or client_of(row) is not INFERENCEX:
        return {}, {}
    options = {
        "chunked_prefill_size": recipe.chunked_prefill_size,
        "max_prefill_tokens": recipe.max_prefill_tokens,
    }
    if _graphs_extend_passes(row):
        options["piecewise_cuda_graph_max_tokens"] = recipe.chunked_prefill_size
    fields: dict[str, object] = {
        "kv_cache_dtype": KV_CACHE_DTYPE,
        "gpu_memory_utilization": recipe.memory_fraction,
    }
    return fields, options
