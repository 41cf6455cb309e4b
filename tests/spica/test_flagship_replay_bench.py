"""The flagship replay benchmark builds its cases through the search's own sample path."""

from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/flagship_replay.py")


@pytest.fixture(scope="module")
def config(bench):
    return bench.search_config("deepseek-ai/DeepSeek-V3")


@pytest.mark.parametrize(
    ("case", "prefill", "decode", "concurrency"),
    [
        ("2p6d", (8, 2, {"moe_ep": 8}), (8, 6, {"moe_tp": 8}), 11_940),
        ("1p3d", (16, 1, {"moe_ep": 16}), (16, 3, {"moe_tp": 16}), 29_791),
    ],
)
def test_the_cases_resolve_to_the_issue_layouts_and_loads(bench, config, case, prefill, decode, concurrency):
    sample = bench.candidate(config, bench.CASES[case], 1.0)
    assert sample["concurrency"] == concurrency
    assert sample["used_gpus"] == 64
    plan = bench.deployment_plan(sample, config.goal)
    assert (plan.model, plan.system, plan.backend) == ("deepseek-ai/DeepSeek-V3", "b200_sxm", "sglang")
    for engine, (dp, replicas, moe) in ((plan.prefill, prefill), (plan.decode, decode)):
        assert (engine.tp, engine.attention_dp, engine.replicas) == (1, dp, replicas)
        assert {k: getattr(engine, k) for k in moe} == moe
    workload = bench.replay_workload(config.workload, sample["concurrency"])
    assert (workload.isl, workload.osl, workload.num_requests) == (1024, 1024, 10 * concurrency)


def test_a_scaled_case_keeps_the_layout_and_scales_the_load(bench, config):
    sample = bench.candidate(config, bench.CASES["2p6d"], 0.01)
    assert sample["concurrency"] == 119
    assert (sample["prefill_attention_dp"], sample["decode_replicas"]) == (8, 6)


def test_the_structure_counters_unwrap_what_they_wrapped(bench):
    before = bench.Worker.begin, bench.Worker.cut, bench.Simulation._handoff, bench.Simulation._complete
    with bench.structure_counters():
        assert bench.Worker.begin is not before[0]
    assert (
        bench.Worker.begin,
        bench.Worker.cut,
        bench.Simulation._handoff,
        bench.Simulation._complete,
    ) == before
