"""An attention-DP worker's pass priced from the tokens its ranks carry in that lock-step pass:
the experts on the sum of the ranks' tokens, the all-to-all as if every rank carried as many as
the busiest, attention and dense GEMMs on the rank's own tokens."""

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import ConfigError
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.model import BatchShape
from aisimulate.perf.polynomial import PolynomialPerfModel
from aisimulate.perf.shape import ParallelShape

DSR1 = "deepseek-ai/DeepSeek-R1"
SHAPE = ParallelShape(tp=1, attention_dp=4, moe_ep=4)
# TRT-LLM gathers each rank's own count: its expert collectives follow the sum of the ranks' tokens.
DEP4 = AnalyticPerfModel(get_model(DSR1), get_system("gb200"), SHAPE, backend="trtllm")
# SGLang's dispatch waits for the busiest sender.
SGLANG_DEP4 = AnalyticPerfModel(get_model(DSR1), get_system("gb200"), SHAPE, backend="sglang")


def _prompt(tokens: int, **group: float) -> BatchShape:
    return BatchShape(prefill_tokens=tokens, prefill_requests=1, **group)


def test_one_prompt_on_one_rank_runs_its_experts_on_its_own_tokens():
    """One 8k prompt on a DEP4 context worker: its experts see 8k tokens (what four ranks of 2k
    each would send them), not 4 x 8k; its attention and dense GEMMs are the 8k prompt's."""
    alone = DEP4.explain(_prompt(8192, group_tokens=8192, busiest_rank_tokens=8192))
    equal = DEP4.explain(_prompt(8192))  # every rank assumed to carry 8k
    quarter = DEP4.explain(_prompt(2048))  # every rank carries 2k: 8k in the experts
    assert alone.moe_ms == pytest.approx(quarter.moe_ms, rel=1e-12)
    assert alone.moe_ms < 0.5 * equal.moe_ms
    assert (alone.gemm_ms, alone.attention_ms) == (equal.gemm_ms, equal.attention_ms)
    # Its experts' collectives move 8k tokens in all.
    assert alone.comm_ms == pytest.approx(quarter.comm_ms, rel=1e-12)
    assert alone.comm_ms < 0.5 * equal.comm_ms
    assert DEP4.pass_time_ms(_prompt(8192, group_tokens=8192, busiest_rank_tokens=8192)) < DEP4.pass_time_ms(
        _prompt(8192)
    )


def test_two_loaded_ranks_price_the_sum_of_their_tokens_in_the_experts():
    one = DEP4.explain(_prompt(4096, group_tokens=4096, busiest_rank_tokens=4096))
    two = DEP4.explain(_prompt(4096, group_tokens=8192, busiest_rank_tokens=4096))
    quarter = DEP4.explain(_prompt(2048))
    assert two.moe_ms == pytest.approx(quarter.moe_ms, rel=1e-12)
    assert two.moe_ms > one.moe_ms
    assert two.comm_ms == pytest.approx(quarter.comm_ms, rel=1e-12)
    assert two.comm_ms > one.comm_ms


def test_a_dispatch_bound_by_its_busiest_sender_waits_for_it():
    """SGLang: the experts run on the sum, the all-to-all as if every rank sent the busiest's."""
    alone = SGLANG_DEP4.explain(_prompt(8192, group_tokens=8192, busiest_rank_tokens=8192))
    equal = SGLANG_DEP4.explain(_prompt(8192))
    quarter = SGLANG_DEP4.explain(_prompt(2048))
    assert alone.moe_ms == pytest.approx(quarter.moe_ms, rel=1e-12)
    assert alone.comm_ms == pytest.approx(equal.comm_ms, rel=1e-12)
    one = SGLANG_DEP4.explain(_prompt(4096, group_tokens=4096, busiest_rank_tokens=4096))
    two = SGLANG_DEP4.explain(_prompt(4096, group_tokens=8192, busiest_rank_tokens=4096))
    held = SGLANG_DEP4.explain(_prompt(4096, group_tokens=12288, busiest_rank_tokens=8192))
    assert two.comm_ms == pytest.approx(one.comm_ms, rel=1e-12)  # no rank sends more than 4k
    assert held.comm_ms > two.comm_ms  # a busier other rank holds this one's all-to-all up


def test_equal_load_group_prices_as_time_ms():
    """Group totals of equally loaded ranks give time_ms's price (the decode passes' price)."""
    shape = BatchShape(
        prefill_tokens=512, prefill_requests=2, decode_requests=16, decode_context_tokens=16_000
    )
    even = BatchShape(
        prefill_tokens=512,
        prefill_requests=2,
        decode_requests=16,
        decode_context_tokens=16_000,
        group_tokens=4 * 528,
        busiest_rank_tokens=528,
    )
    for perf in (DEP4, SGLANG_DEP4):
        assert perf.pass_time_ms(even) == pytest.approx(perf.pass_time_ms(shape), rel=1e-12)


def test_providers_without_a_rank_group_ignore_the_group():
    poly = PolynomialPerfModel()
    assert poly.pass_time_ms(_prompt(1000, group_tokens=4000, busiest_rank_tokens=1000)) == poly.pass_time_ms(
        _prompt(1000)
    )


def test_group_tokens_are_validated():
    with pytest.raises(ConfigError, match="group_tokens >= 0"):
        BatchShape(group_tokens=-1)
