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
"""

from __future__ import annotations

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
