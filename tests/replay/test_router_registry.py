"""Router modes are one registry; each router says what it reads, and its pool runs accordingly."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
from pydantic import ValidationError

from aisimulate.replay import DeploymentPlan, EngineSpec, KvRouterSpec, RouterSpec, router_spec
from aisimulate.replay.metrics import Collector
from aisimulate.replay.router import ROUTERS, make_router
from aisimulate.replay.workers import build_pool, resolve_engine

PLAN = DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", agg=EngineSpec(num_gpu_blocks=4096))
ENGINE = resolve_engine(PLAN, PLAN.agg, perf="polynomial", perf_table=None, where="agg")


def pool(spec: RouterSpec, *, exact: bool = False):
    return build_pool("agg", ENGINE, spec, Collector(), unit=1, exact=exact, rng=np.random.default_rng(0))


def test_the_router_modes_are_the_registry():
    # The plan's union of settings models and the registry list the same models, in one order.
    assert get_args(get_args(RouterSpec)[0]) == tuple(kind.spec for kind in ROUTERS.values())
    for mode, kind in ROUTERS.items():
        spec = kind.spec()
        assert spec.mode == mode and router_spec({"mode": mode}) == spec
        router = make_router(spec, np.random.default_rng(0))
        assert type(router) is kind.build
        assert isinstance(router.reads_pass_state, bool) and isinstance(router.reads_cached_blocks, bool)


def test_a_router_without_a_mode_is_round_robin():
    assert router_spec({}) == ROUTERS["round_robin"].spec()
    assert DeploymentPlan(model="m", system="s", router={}).router.mode == "round_robin"


@pytest.mark.parametrize(
    ("spec", "reads_pass_state", "reads_cached_blocks"),
    [
        (router_spec({"mode": "round_robin"}), False, False),
        (router_spec({"mode": "random"}), False, False),
        (router_spec({"mode": "least_loaded"}), True, False),  # active blocks, every pass
        (KvRouterSpec(), False, True),  # cached prefixes
        (KvRouterSpec(active_decode_blocks_threshold=0.5), True, True),
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


# A setting foreign to each mode: the KV router's for the others, and an engine key for it.
FOREIGN = {
    "round_robin": "overlap_score_credit",
    "random": "router_queue_policy",
    "least_loaded": "router_queue_threshold",
    "kv_router": "max_num_seqs",
}


@pytest.mark.parametrize("mode", ROUTERS)
def test_a_setting_its_mode_does_not_take_is_an_error_naming_both(mode):
    setting = FOREIGN[mode]
    with pytest.raises(ValidationError) as caught:
        DeploymentPlan(model="m", system="s", router={"mode": mode, setting: 1.0})
    (error,) = caught.value.errors()
    assert error["type"] == "extra_forbidden" and error["loc"] == ("router", mode, setting)
    assert f"router.{mode}.{setting}\n  Extra inputs are not permitted" in str(caught.value)
    assert setting not in ROUTERS[mode].spec.model_fields


def plans():
    """A plan per router mode, each with a setting off its default where the mode has one, and a
    disaggregated plan whose pools route differently."""
    for mode, kind in ROUTERS.items():
        settings = {"overlap_score_credit": 0.5, "router_queue_policy": "wspt"} if mode == "kv_router" else {}
        yield pytest.param(DeploymentPlan(model="m", system="s", router=kind.spec(**settings)), id=mode)
    disagg = DeploymentPlan(
        model="m",
        system="s",
        mode="disagg",
        prefill=EngineSpec(),
        decode=EngineSpec(),
        prefill_router=KvRouterSpec(kv_event_lag_ms=5.0),
        decode_router=router_spec({"mode": "least_loaded"}),
    )
    yield pytest.param(disagg, id="disagg")


@pytest.mark.parametrize("plan", plans())
def test_a_plan_round_trips_with_its_routers(plan):
    assert DeploymentPlan.model_validate(plan.model_dump()) == plan
    again = DeploymentPlan.model_validate_json(plan.model_dump_json())
    assert again == plan
    for (_, _, router), (_, _, restored) in zip(plan.pools(), again.pools(), strict=True):
        assert type(restored) is ROUTERS[router.mode].spec and restored == router
