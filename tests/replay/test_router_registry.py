"""Router modes are one registry; each router says what it reads, and its pool runs accordingly."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest

from aisimulate.replay import DeploymentPlan, EngineSpec, RouterSpec
from aisimulate.replay.metrics import Collector
from aisimulate.replay.plan import ROUTER_SETTINGS
from aisimulate.replay.router import ROUTERS, make_router
from aisimulate.replay.workers import build_pool, resolve_engine

PLAN = DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", agg=EngineSpec(num_gpu_blocks=4096))
ENGINE = resolve_engine(PLAN, PLAN.agg, perf="polynomial", perf_table=None, where="agg")


def pool(spec: RouterSpec, *, exact: bool = False):
    return build_pool("agg", ENGINE, spec, Collector(), unit=1, exact=exact, rng=np.random.default_rng(0))


def test_the_router_modes_are_the_registry():
    assert get_args(RouterSpec.model_fields["mode"].annotation) == tuple(ROUTERS) == tuple(ROUTER_SETTINGS)
    for mode in ROUTERS:
        router = make_router(RouterSpec(mode=mode), np.random.default_rng(0))
        assert type(router) is ROUTERS[mode]
        assert isinstance(router.reads_pass_state, bool) and isinstance(router.reads_cached_blocks, bool)


@pytest.mark.parametrize(
    ("spec", "reads_pass_state", "reads_cached_blocks"),
    [
        (RouterSpec(mode="round_robin"), False, False),
        (RouterSpec(mode="random"), False, False),
        (RouterSpec(mode="least_loaded"), True, False),  # active blocks, every pass
        (RouterSpec(mode="kv_router"), False, True),  # cached prefixes
        (RouterSpec(mode="kv_router", active_decode_blocks_threshold=0.5), True, True),
    ],
)
def test_a_pool_steps_its_ranks_when_its_router_reads_pass_state(spec, reads_pass_state, reads_cached_blocks):
    built = pool(spec)
    assert built.router.reads_pass_state is reads_pass_state
    assert built.router.reads_cached_blocks is reads_cached_blocks
    worker = built.workers[0]
    assert worker._stretches is not reads_pass_state
    assert worker.ranks[0].stretch_keeps_cache is reads_cached_blocks
    assert pool(spec, exact=True).workers[0]._stretches is False  # exact always steps


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"mode": "round_robin", "overlap_score_credit": 0.5},
            "overlap_score_credit applies to mode kv_router",
        ),
        ({"mode": "least_loaded", "router_queue_threshold": 1.0}, "router_queue_threshold applies to mode"),
        ({"mode": "random", "router_queue_policy": "lcfs"}, "router_queue_policy applies to mode kv_router"),
    ],
)
def test_a_setting_its_mode_does_not_read_is_an_error(settings, message):
    with pytest.raises(ValueError, match=message):
        RouterSpec(**settings)
    assert RouterSpec(**{**settings, "mode": "kv_router"}).mode == "kv_router"
