import pytest

from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.request import Request
from aisimulate.workload import SyntheticWorkload
from aisimulate.workload.request import RequestSpec


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


def request(rid=0, isl=127, osl=30):
    """One engine request (prompt hashed into two blocks of 64 tokens), for tests that drive a
    rank directly."""
    spec = RequestSpec(
        request_id=rid,
        session_id=rid,
        turn=0,
        input_tokens=isl,
        output_tokens=osl,
        hash_ids=tuple(range(100 * rid, 100 * rid + 2)),
        hash_block_tokens=64,
    )
    return Request.from_spec(spec, 0.0, 64, max_model_len=None)


def assert_matches_exact(fast, exact):
    """The fast path's summary agrees with the exact loop's within 0.5% on every number (the
    replay's contract between its aggregates and the reference loop)."""
    for key, value in exact.items():
        if isinstance(value, int | float) and key != "wall_time_ms":
            assert fast[key] == pytest.approx(value, rel=0.005, abs=1e-6), key


@pytest.fixture
def replay():
    return run


def burst(n, isl, osl, **kw):
    """n requests arriving together at t=0."""
    return SyntheticWorkload(isl=isl, osl=osl, num_requests=n, arrival_interval_ms=0, **kw)
