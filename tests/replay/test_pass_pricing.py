"""A pass is priced in one argument order, and what a rank keeps of it is a named record."""

from __future__ import annotations

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.model import BatchShape, PassRecord
from aisimulate.perf.shape import ParallelShape
from aisimulate.replay import EngineSpec
from aisimulate.replay.engine import Rank, chunk_totals
from aisimulate.replay.metrics import Collector
from aisimulate.replay.request import Request
from aisimulate.workload.request import RequestSpec

PERF = AnalyticPerfModel(get_model("meta-llama/Llama-3.1-8B"), get_system("h200_sxm"), ParallelShape(tp=1))


def test_chunk_totals_are_time_ms_prefill_arguments_in_its_order():
    chunks = [(300, 0, None), (128, 512, None), (7, 4000, None)]
    batch = BatchShape.from_chunks([(t, c) for t, c, _ in chunks], decode_contexts=[900, 1500])
    ms = PERF.time_ms(*chunk_totals(chunks), 2, 2400, 1.0, 0, 0)
    assert ms == pytest.approx(PERF.pass_time_ms(batch), rel=1e-12)
    # Swapping the context and the pairs, the order the replay once used, prices another pass.
    tokens, requests, pairs, context = chunk_totals(chunks)
    assert PERF.time_ms(tokens, requests, context, pairs, 2, 2400, 1.0, 0, 0) != pytest.approx(ms)


def test_a_rank_keeps_its_latest_pass_as_a_named_record():
    rank = Rank(EngineSpec(num_gpu_blocks=1000), "vllm", PERF, 1000, Collector())
    assert rank.last_pass is None
    prompt = RequestSpec(
        request_id=0,
        session_id=0,
        turn=0,
        input_tokens=100,
        output_tokens=4,
        hash_ids=(1, 2),
        hash_block_tokens=64,
    )
    rank.enqueue(Request.from_spec(prompt, 0.0, 64, max_model_len=None), 0.0)
    first = rank.begin_pass(0.0)
    assert rank.last_pass == PassRecord(
        prefill_tokens=100, prefill_requests=1, decode_requests=0, decode_context_tokens=0, duration_ms=first
    )
    rank.end_pass(first)
    second = rank.begin_pass(first)  # its first decode step attends to the prompt and one token
    assert rank.last_pass == PassRecord(0, 0, 1, 101, second)
