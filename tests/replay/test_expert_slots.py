"""Redundant expert slots (EPLB): a rank holds its share of the slots, and ranks that do not
divide the experts run only with them."""

import pytest

from aisimulate.catalog import get_model
from aisimulate.errors import ConfigError, InfeasibleError
from aisimulate.replay import DeploymentPlan, EngineSpec
from aisimulate.replay.workers import resolve_engine


def _engine(**shape):
    spec = EngineSpec(tp=1, attention_dp=shape.pop("dp"), moe_tp=1, max_model_len=2048, **shape)
    plan = DeploymentPlan(model="deepseek-ai/DeepSeek-R1", system="gb200", backend="sglang", agg=spec)
    return resolve_engine(plan, spec, perf="analytic", perf_table=None, where="agg")


def test_redundant_slots_take_memory_from_the_kv_cache():
    plain = _engine(dp=32, moe_ep=32)
    slots = _engine(dp=32, moe_ep=32, moe_expert_slots=288)  # nine experts a rank, not eight
    assert 0 < slots.num_gpu_blocks < plain.num_gpu_blocks


def test_ranks_that_do_not_divide_the_experts_need_slots_they_do_divide():
    with pytest.raises(InfeasibleError, match="num_experts % moe_ep == 0"):
        _engine(dp=48, moe_ep=48)
    assert _engine(dp=48, moe_ep=48, moe_expert_slots=288).num_gpu_blocks > 0  # 256 + 32, six a rank


def test_fewer_slots_than_experts_or_a_dense_model_is_a_config_error():
    with pytest.raises(ConfigError, match="at least its 256 experts, but got 128"):
        _engine(dp=32, moe_ep=32, moe_expert_slots=128)
    with pytest.raises(ConfigError, match="need an MoE model"):
        get_model("meta-llama/Llama-3.1-8B").with_expert_slots(8)
