import pytest

from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.workload import SyntheticWorkload


def run(
    workload,
    *,
    backend="vllm",
    perf="polynomial",
    exact=False,
    capture_requests=True,
    sla=None,
    seed=0,
    router="round_robin",
    **engine,
):
    engine.setdefault("num_gpu_blocks", 16384)
    engine.setdefault("first_token_lag_passes", 0)  # tokens at their pass end: engine timings
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        backend=backend,
        agg=EngineSpec(**engine),
        router={"mode": router},
        frontend_latency_ms=0,  # engine timings: these tests are about the engine
    )
    return simulate(
        plan, workload, perf=perf, exact=exact, capture_requests=capture_requests, sla=sla, seed=seed
    )


@pytest.fixture
def replay():
    return run


def burst(n, isl, osl, **kw):
    """n requests arriving together at t=0."""
    return SyntheticWorkload(isl=isl, osl=osl, num_requests=n, arrival_interval_ms=0, **kw)
