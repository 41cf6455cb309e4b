"""A replay or search candidate with ``cuda_graph_padding`` prices its passes at the backend's
captured CUDA-graph sizes; without it (the default) at their own sizes."""

import pytest
from pydantic import ValidationError

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


def graph_sizes(plan, spec):
    return resolve_engine(plan, spec, perf="analytic", perf_table=None, where="agg").perf.cuda_graph_sizes


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_padded_engine_takes_its_backends_sizes_unless_the_plan_sets_them(backend):
    def sizes(**engine):
        plan = moe_plan(backend, **engine)
        return graph_sizes(plan, plan.agg)

    assert sizes() == ()
    assert sizes(cuda_graph_padding=True) == BACKEND_PROFILES[backend].cuda_graphs.capture_sizes()
    assert sizes(cuda_graph_padding=True, cuda_graph_max_batch_size=64)[-1] == 64


def test_a_graph_limit_without_padding_is_a_config_error():
    with pytest.raises(ValidationError, match="cuda_graph_max_batch_size needs cuda_graph_padding"):
        EngineSpec(cuda_graph_max_batch_size=64)


def test_five_decoders_replay_slower_padded_to_eight_than_eagerly():
    def tpot(**engine):
        report = simulate(moe_plan("sglang", **engine), burst(5, isl=256, osl=64), perf="analytic")
        return report.summary["mean_tpot_ms"]

    padded, eager = tpot(cuda_graph_padding=True), tpot()
    assert padded > eager * 1.02
    assert tpot(cuda_graph_padding=True, cuda_graph_max_batch_size=5) == eager  # a graph of 5: no padding


def test_a_search_candidate_is_priced_with_its_backends_graphs_when_padded():
    plan = deployment_plan(unroll_sample(SPACE, AGG_SELECTION, ReplicaConfig(WorkerShape(tp=4), 2)))
    assert graph_sizes(plan, plan.agg) == ()
    padded = plan.agg.model_copy(update={"cuda_graph_padding": True})
    assert graph_sizes(plan, padded) == BACKEND_PROFILES[plan.backend].cuda_graphs.capture_sizes()
