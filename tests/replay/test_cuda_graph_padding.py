"""Every replay and search candidate prices its decode passes at the backend's captured sizes."""

import pytest

from aisimulate.catalog.backends import BACKEND_PROFILES, BACKENDS
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.workers import resolve_engine
from aisimulate.spica.deploy import deployment_plan
from aisimulate.spica.parallel import ReplicaConfig, WorkerShape
from aisimulate.spica.sample import unroll_sample
from tests.replay.conftest import burst
from tests.spica.test_sample import AGG_SELECTION, SPACE


def moe_plan(backend, **engine):
    return DeploymentPlan(
        model="Qwen/Qwen3-30B-A3B",
        system="h200_sxm",
        backend=backend,
        agg=EngineSpec(tp=2, num_gpu_blocks=16384, **engine),
        frontend_latency_ms=0,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replayed_engine_takes_its_backends_sizes_unless_the_plan_sets_them(backend):
    def sizes(**engine):
        plan = moe_plan(backend, **engine)
        engine = resolve_engine(plan, plan.agg, perf="analytic", perf_table=None, where="agg")
        return engine.perf.cuda_graph_sizes

    assert sizes() == BACKEND_PROFILES[backend].cuda_graphs.capture_sizes()
    assert sizes(cuda_graph_max_batch_size=64)[-1] == 64
    assert sizes(cuda_graph_max_batch_size=0) == ()


def test_five_decoders_replay_slower_padded_to_eight_than_eagerly():
    def tpot(**engine):
        report = simulate(moe_plan("sglang", **engine), burst(5, isl=256, osl=64), perf="analytic")
        return report.summary["mean_tpot_ms"]

    padded, eager = tpot(), tpot(cuda_graph_max_batch_size=0)
    assert padded > eager * 1.02
    assert tpot(cuda_graph_max_batch_size=5) == eager  # a graph of exactly 5: no padding


def test_a_search_candidate_is_priced_with_its_backends_graphs():
    plan = deployment_plan(unroll_sample(SPACE, AGG_SELECTION, ReplicaConfig(WorkerShape(tp=4), 2)))
    assert plan.agg.cuda_graph_max_batch_size is None
    engine = resolve_engine(plan, plan.agg, perf="analytic", perf_table=None, where="agg")
    assert engine.perf.cuda_graph_sizes == BACKEND_PROFILES[plan.backend].cuda_graphs.capture_sizes()
