"""SGLang's piecewise prefill graph on an MLA model: which engines pay it, and what a pass adds."""

import dataclasses

import pytest

import aisimulate.catalog.backends as backends
from aisimulate.catalog import get_model, get_system
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.sglang_graphs import graphed_mla_prefill
from aisimulate.workload import SyntheticWorkload

DEEPSEEK = "deepseek-ai/DeepSeek-V3"
GRAPHED = {"piecewise_cuda_graph_max_tokens": 16384}


def cost(spec=None, *, backend="sglang", model=DEEPSEEK, system="b300_sxm", role="agg"):
    spec = spec or EngineSpec(tp=4, moe_tp=4, sglang=GRAPHED)
    return graphed_mla_prefill(backend, spec, get_model(model), get_system(system), role=role)


def test_a_graphed_pass_adds_the_absorbed_attention_of_its_pairs_at_the_fitted_rate():
    graphed = cost()
    assert graphed is not None and graphed.max_tokens == 16384
    # 61 layers, 128 / 4 heads a GPU, 2 x (512 + 512 + 64) FLOPs a head and pair, at the fitted
    # fraction of B300's bf16 rate.
    rate = backends.BACKEND_PROFILES["sglang"].graphed_mla_attention_efficiency * 2250e12
    assert graphed.ms_per_pair == pytest.approx(61 * 2 * 32 * 1088 / rate * 1e3)
    pairs = 8192 * 8193 / 2
    assert graphed.extra_ms(8192, pairs) == pytest.approx(pairs * graphed.ms_per_pair)
    # Twice the GPUs, half the heads each: half the cost.
    wider = cost(EngineSpec(tp=8, moe_tp=8, sglang=GRAPHED))
    assert wider.ms_per_pair == pytest.approx(graphed.ms_per_pair / 2)


def test_a_pass_larger_than_every_captured_size_runs_eagerly():
    graphed = cost(EngineSpec(tp=4, moe_tp=4, sglang={"piecewise_cuda_graph_max_tokens": 8192}))
    assert graphed.extra_ms(8192, 1e6) > 0
    assert graphed.extra_ms(8193, 1e6) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"spec": EngineSpec(tp=4, moe_tp=4)},  # no graph for extend passes (today's releases)
        {"backend": "vllm"},
        {"model": "Qwen/Qwen3-32B"},  # no MLA: its prefill keeps its kernel
        {"model": "zhipuai/GLM-5"},  # sparse attention runs SGLang's nsa backend
        {"system": "h100_sxm"},  # Hopper: no trtllm_mla
        {"role": "prefill"},  # SGLang's disaggregated prefill servers run no graph
        {"spec": EngineSpec(tp=1, attention_dp=4, moe_tp=1, moe_ep=4, sglang=GRAPHED)},
        {"spec": EngineSpec(tp=2, pp=2, moe_tp=2, sglang=GRAPHED)},
        {"spec": EngineSpec(tp=4, moe_ep=4, moe_tp=1, sglang={**GRAPHED, "moe_a2a_backend": "deepep"})},
    ],
)
def test_engines_whose_extend_passes_run_eagerly_pay_nothing(kwargs):
    assert cost(**kwargs) is None


def first_token_ms(max_tokens, isl=6000):
    plan = DeploymentPlan(
        model=DEEPSEEK,
        system="b300_sxm",
        backend="sglang",
        agg=EngineSpec(tp=8, moe_tp=8, sglang={"piecewise_cuda_graph_max_tokens": max_tokens}),
        frontend_latency_ms=0,
    )
    workload = SyntheticWorkload(isl=isl, osl=2, num_requests=1, arrival_interval_ms=0)
    report = simulate(plan, workload, capture_requests=True)
    return report.requests[0]["ttft_ms"]


def test_the_replay_adds_the_graph_to_the_extend_pass_of_a_served_prompt():
    spec = EngineSpec(tp=8, moe_tp=8, sglang=GRAPHED)
    graphed = graphed_mla_prefill("sglang", spec, get_model(DEEPSEEK), get_system("b300_sxm"), role="agg")
    eager = first_token_ms(0)
    assert first_token_ms(16384) - eager == pytest.approx(graphed.extra_ms(6000, 6000 * 6001 / 2), rel=1e-9)
    assert first_token_ms(4096) == pytest.approx(eager)  # above the largest captured size


def test_the_rate_is_the_backend_profiles(monkeypatch):
    before = cost().ms_per_pair
    profile = backends.BACKEND_PROFILES["sglang"]
    halved = profile.graphed_mla_attention_efficiency / 2
    slower = dataclasses.replace(profile, graphed_mla_attention_efficiency=halved)
    monkeypatch.setitem(backends.BACKEND_PROFILES, "sglang", slower)
    assert cost().ms_per_pair == pytest.approx(2 * before)
