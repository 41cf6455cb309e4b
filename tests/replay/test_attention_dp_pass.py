"""A stepped pass of an attention-DP worker is priced from the tokens its ranks carry in it: one
prompt on one rank of four sends its experts its own tokens, not four times them."""

from __future__ import annotations

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.shape import ParallelShape
from aisimulate.replay import EngineSpec
from aisimulate.replay.engine import Rank
from aisimulate.replay.metrics import Collector
from aisimulate.replay.request import Request
from aisimulate.replay.workers import Worker
from aisimulate.workload.request import RequestSpec

SPEC = EngineSpec(num_gpu_blocks=2000, attention_dp=4, max_num_batched_tokens=16384)
PERF = AnalyticPerfModel(
    get_model("deepseek-ai/DeepSeek-R1"),
    get_system("gb200"),
    ParallelShape(tp=1, attention_dp=4, moe_ep=4),
    backend="trtllm",
)


def _worker() -> Worker:
    collector = Collector()
    ranks = [Rank(SPEC, "trtllm", PERF, 2000, collector, rank=i, role="prefill") for i in range(4)]
    return Worker(ranks, stretches=True)


def _prompt(rank: Rank, request_id: int, tokens: int) -> None:
    spec = RequestSpec(
        request_id=request_id,
        session_id=request_id,
        turn=0,
        input_tokens=tokens,
        output_tokens=2,
        hash_ids=tuple(range(request_id * 1000, request_id * 1000 + tokens // 64)),
        hash_block_tokens=64,
    )
    rank.enqueue(Request.from_spec(spec, 0.0, 64, max_model_len=None), 0.0)


def test_one_prompt_on_a_dep4_worker_is_priced_at_its_own_tokens():
    worker = _worker()
    _prompt(worker.ranks[0], 0, 8192)
    end_ms = worker.begin(0.0)
    rank = worker.ranks[0]
    own = PERF.group_time_ms(rank.pass_args, 8192, 8192)
    assert end_ms == pytest.approx(own, rel=1e-12)
    assert rank.last_pass is not None and rank.last_pass.duration_ms == end_ms
    # The equal-load price (every rank assumed to carry 8k) is far above it.
    assert PERF.time_ms(*rank.pass_args) > 1.2 * end_ms


def test_two_loaded_ranks_price_the_sum_of_their_tokens():
    worker = _worker()
    _prompt(worker.ranks[0], 0, 4096)
    _prompt(worker.ranks[1], 1, 4096)
    end_ms = worker.begin(0.0)
    args = worker.ranks[0].pass_args
    assert end_ms == pytest.approx(PERF.group_time_ms(args, 8192, 4096), rel=1e-12)
    assert end_ms > PERF.group_time_ms(args, 4096, 4096)  # the other rank's tokens count
