"""The report names the latency provider that ran, including what ``perf: auto`` picked."""

import pytest

from aisimulate.replay import DeploymentPlan, EngineSpec
from aisimulate.replay.workers import resolve_engine
from aisimulate.workload import SyntheticWorkload
from tests.replay.conftest import run

WORKLOAD = SyntheticWorkload(isl=512, osl=16, num_requests=8, concurrency=4)


def test_auto_runs_aic_for_a_covered_worker_and_says_so():
    auto = run(WORKLOAD, perf="auto")
    aic = run(WORKLOAD, perf="aic")
    assert auto.perf_model == aic.perf_model == "aic"
    timing = ("wall_time_ms",)
    assert {k: v for k, v in auto.summary.items() if k not in timing} == {
        k: v for k, v in aic.summary.items() if k not in timing
    }
    assert aic.summary["completed_requests"] == 8


def test_aic_and_analytic_tell_apart_in_the_report():
    assert run(WORKLOAD, perf="analytic").perf_model == "analytic"


def test_aic_sizes_the_kv_cache_with_its_own_memory_model():
    plan = DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", agg=EngineSpec())
    spec = plan.agg
    analytic = resolve_engine(plan, spec, perf="analytic", perf_table=None, where="agg")
    aic = resolve_engine(plan, spec, perf="aic", perf_table=None, where="agg")
    tokens = aic.perf.kv_tokens_per_rank(
        gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256
    )
    assert aic.num_gpu_blocks == tokens // spec.block_size != analytic.num_gpu_blocks
    assert aic.num_gpu_blocks == pytest.approx(analytic.num_gpu_blocks, rel=0.01)


def test_vllm_schedules_asynchronously_unless_told_otherwise():
    def perf_of(backend, **engine):
        plan = DeploymentPlan(
            model="meta-llama/Llama-3.1-8B", system="h200_sxm", backend=backend, agg=EngineSpec(**engine)
        )
        return resolve_engine(plan, plan.agg, perf="analytic", perf_table=None, where="agg").perf

    assert perf_of("vllm").async_scheduling is True
    assert perf_of("vllm", async_scheduling=False).async_scheduling is False
    assert perf_of("sglang").async_scheduling is False  # its overlap is in its fitted overhead
    async_run = run(WORKLOAD, perf="analytic")
    sync_run = run(WORKLOAD, perf="analytic", async_scheduling=False)
    assert async_run.summary["mean_tpot_ms"] < sync_run.summary["mean_tpot_ms"]


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_async_scheduling_is_a_vllm_key(backend):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"agg\.async_scheduling is vLLM's switch"):
        DeploymentPlan(
            model="meta-llama/Llama-3.1-8B",
            system="h200_sxm",
            backend=backend,
            agg=EngineSpec(async_scheduling=True),
        )
