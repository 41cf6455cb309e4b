"""The load generator a measured row ran under, told apart by where the row came from.

**InferenceX** (SemiAnalysis; ``benchmarks/benchmark_lib.sh`` and
``utils/bench_serving/benchmark_serving.py``) is the client of the rows whose source is its
results database (``silicon_data_source`` starting ``db-dump/``) or one of its dated exports
(``source_file=YYYY-MM-DD.csv``; those rows carry InferenceX's model names, its container images
and its sequence configs 1k/1k, 1k/8k and 8k/1k). Its random dataset draws every request's input
and output length uniformly from the integers in [int(``random_range_ratio`` × L), L] (0.8 by
default), generates with ``--ignore-eos`` (every request produces its drawn length), sends with an
unlimited request rate under ``max_concurrency`` = the row's concurrency, and counts
``num_prompts`` = 10 × concurrency requests. Its ``2 × concurrency`` warm-up requests are all
awaited before the counted run starts, so the counted run begins on an idle server, ramp-up
included; a replay without cold-start effects reproduces that by not replaying them. TTFT and
TPOT are means over the counted requests, TPOT per request being (e2e − TTFT) / (output − 1),
the replay's own definition.

**Every other source** — the AIConfigurator team's gap-analysis runs
(``source_file=/.../aic-auto-gap-analysis/...``, Dynamo deployments with their job ids), and
files of our own format without such a name — records no client settings. Their sequence lengths
(1024/128, 2000/500, 4000/1000, ...) are nominal fixed lengths, so they replay every request at
exactly those lengths, with the output-length spread fitted by ``benchmarks/calibrate_e2e.py``
standing in for what desynchronised the measured closed loops, and max(100, 10 × concurrency)
requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aisimulate.fidelity.measured import MeasuredRow
from aisimulate.workload import LengthDistribution

INFERENCEX_RANGE_RATIO = 0.8
_DATED_EXPORT = re.compile(r"^(?:source_file=)?\d{4}-\d{2}-\d{2}\.csv(?:;|$)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Client:
    """How a row's load generator drew its requests and how many it counted."""

    name: str
    range_ratio: float | None  # lengths uniform in [int(ratio × L), L]; None: exactly L
    random_tokens: bool  # prompts of random token ids (its MTP drafts' acceptance is their own)
    prompts_per_user: int
    min_prompts: int

    def num_prompts(self, concurrency: int) -> int:
        return max(self.min_prompts, self.prompts_per_user * concurrency)

    def length(self, nominal: int) -> int | LengthDistribution:
        """The distribution of one request's length for a nominal (the row's) length."""
        if self.range_ratio is None:
            return nominal
        low = max(1, int(nominal * self.range_ratio))
        return nominal if low == nominal else LengthDistribution(dist="uniform", min=low, max=nominal)


INFERENCEX = Client(
    name="inferencex",
    range_ratio=INFERENCEX_RANGE_RATIO,
    random_tokens=True,
    prompts_per_user=10,
    min_prompts=1,
)
FIXED_LENGTHS = Client(
    name="fixed-lengths", range_ratio=None, random_tokens=False, prompts_per_user=10, min_prompts=100
)


# ``--scheduler-recv-interval`` of InferenceX's single-node SGLang recipes (its
# ``benchmarks/single_node/<model>_<precision>_b300.sh``, the B200 recipes reused), by the
# checkpoint that ran: (below 16 users, from 16 users on). A recipe that sets none (GLM-5) runs
# SGLang's default, 1. The disaggregated (multi-node) rows do not identify their recipes; they
# replay with the same checkpoint's interval from 16 users on and poll every pass below, as
# their TTFT in decode passes suggests (docs/fidelity.md, "Disaggregated TTFT"). InferenceX's
# DeepSeek recipes (``dsr1_*``) serve DeepSeek-R1-0528; its results database writes the same runs
# under DeepSeek-V3 names too, so both names of a checkpoint poll alike.
_DEEPSEEK_RECV_INTERVAL = (10, 30)
INFERENCEX_SGLANG_RECV_INTERVAL: dict[str, tuple[int, int]] = {
    "Qwen/Qwen3.5-397B-A17B": (10, 30),
    "Qwen/Qwen3.5-397B-A17B-FP8": (10, 10),
    "nvidia/Qwen3.5-397B-A17B-NVFP4": (10, 30),
    "deepseek-ai/DeepSeek-V3": _DEEPSEEK_RECV_INTERVAL,
    "nvidia/DeepSeek-V3-0324-FP4": _DEEPSEEK_RECV_INTERVAL,
    "deepseek-ai/DeepSeek-R1": _DEEPSEEK_RECV_INTERVAL,
    "nvidia/DeepSeek-R1-0528-FP4": _DEEPSEEK_RECV_INTERVAL,
}


def sglang_recv_interval(row: MeasuredRow, checkpoint: str) -> int:
    """The ``--scheduler-recv-interval`` a row's SGLang servers ran with: its checkpoint's
    InferenceX recipe's (disaggregated: from 16 users on), else SGLang's default (1)."""
    if row.backend != "sglang" or client_of(row) is not INFERENCEX:
        return 1
    few, many = INFERENCEX_SGLANG_RECV_INTERVAL.get(checkpoint, (1, 1))
    if row.mode == "disagg":
        few = 1  # their TTFT at 4-8 users lies within 2 decode passes of the replay's
    return many if row.concurrency >= 16 else few


# ``--max-num-batched-tokens`` of InferenceX's single-node vLLM recipes, as a multiple of the
# row's nominal input length, by the checkpoint and system that ran: the MiniMax-M2.5 B300
# recipes (``minimaxm2.5_fp8_b300.sh``, ``minimaxm2.5_fp4_b300.sh``, the B200 recipes reused)
# launch with 2 x ISL. Every other recipe leaves vLLM's default (8192 on these GPUs), which the
# engine's own default already is.
INFERENCEX_VLLM_BATCHED_TOKENS_PER_ISL: dict[tuple[str, str], int] = {
    ("MiniMaxAI/MiniMax-M2.5", "b300_sxm"): 2,
    ("nvidia/MiniMax-M2.5-NVFP4", "b300_sxm"): 2,
}


def vllm_max_num_batched_tokens(row: MeasuredRow, checkpoint: str) -> int | None:
    """The ``--max-num-batched-tokens`` a row's vLLM server ran with when its InferenceX recipe
    sets one; None: the engine default."""
    if row.backend != "vllm" or row.mode != "agg" or client_of(row) is not INFERENCEX:
        return None
    per_isl = INFERENCEX_VLLM_BATCHED_TOKENS_PER_ISL.get((checkpoint, row.system))
    return None if per_isl is None else per_isl * row.isl


# AIConfigurator's gap-analysis runs (``source_file=.../aic-auto-gap-analysis/...``) deploy what
# AIConfigurator's generator writes. Its TensorRT-LLM engine templates
# (``generator/config/backend_templates/trtllm/extra_engine_args.<version>.yaml.j2``, 1.0.0rc3
# on) leave ``enable_chunked_prefill`` false, and its rules (``generator/rule_plugin/trtllm.rule``)
# size an aggregated worker's ``max_num_tokens`` as its max_batch_size + ISL + 1500: a pass holds
# its decode tokens and whole prompts up to that, so one or two prompts prefill together.
AIC_GAP_ANALYSIS_SOURCE = "aic-auto-gap-analysis"
AIC_TRTLLM_AGG_TOKENS_OVER_ISL = 1500


def trtllm_agg_launch(row: MeasuredRow, max_batch_size: int) -> dict[str, int | bool]:
    """The scheduling limits AIConfigurator's generator launched an aggregated TensorRT-LLM
    worker of ``max_batch_size`` sequences with, for its gap-analysis rows; empty for others."""
    if row.backend != "trtllm" or row.mode != "agg" or AIC_GAP_ANALYSIS_SOURCE not in row.source:
        return {}
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max_batch_size + row.isl + AIC_TRTLLM_AGG_TOKENS_OVER_ISL,
    }


def client_of(row: MeasuredRow) -> Client:
    """The client that measured ``row``, from its recorded source."""
    source = row.source.strip()
    if source.startswith("db-dump/") or _DATED_EXPORT.match(source):
        return INFERENCEX
    return FIXED_LENGTHS
