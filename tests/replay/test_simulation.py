import gc
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aisimulate.errors import ConfigError, InfeasibleError
from aisimulate.replay import DeploymentPlan, EngineSpec, engine, simulate
from aisimulate.workload import SyntheticWorkload, TraceWorkload

from .conftest import assert_matches_exact, burst, run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "aisimulate" / "replay"
TRACE = EXAMPLES / "conversation_400.jsonl"


def numeric(summary):
    return {k: v for k, v in summary.items() if isinstance(v, int | float) and k != "wall_time_ms"}


SCENARIOS = {
    "closed_loop_many_workers": dict(
        workload=SyntheticWorkload(isl=700, osl=300, num_requests=120, concurrency=40), replicas=3
    ),
    "open_loop_poisson_lengths": dict(
        workload=SyntheticWorkload(
            isl={"mean": 900, "std": 300},
            osl={"dist": "uniform", "min": 20, "max": 400},
            num_requests=150,
            request_rate=6,
            arrival="poisson",
        ),
        replicas=2,
    ),
    "prefix_groups_multi_turn": dict(
        workload=SyntheticWorkload(
            isl=1500,
            osl=80,
            num_requests=40,
            concurrency=12,
            turns_per_session=3,
            inter_turn_delay_ms=200,
            shared_prefix_ratio=0.6,
            num_prefix_groups=3,
        ),
    ),
    "kv_pressure_preemption": dict(
        workload=SyntheticWorkload(isl=900, osl=500, num_requests=60, concurrency=24), num_gpu_blocks=180
    ),
    "trtllm": dict(
        workload=SyntheticWorkload(isl=900, osl=300, num_requests=60, concurrency=24),
        backend="trtllm",
        num_gpu_blocks=300,
    ),
    "sglang": dict(
        workload=SyntheticWorkload(isl=900, osl=300, num_requests=60, concurrency=24),
        backend="sglang",
        num_gpu_blocks=300,
    ),
    "trace_open_loop": dict(workload=TraceWorkload(trace_path=TRACE, max_requests=150), replicas=4),
    "analytic_perf": dict(
        workload=SyntheticWorkload(isl=2000, osl=200, num_requests=80, concurrency=16), perf="analytic"
    ),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_fast_path_matches_the_exact_pass_by_pass_loop(name):
    kw = dict(SCENARIOS[name])
    workload = kw.pop("workload")
    fast = run(workload, capture_requests=False, **kw).summary
    exact = run(workload, exact=True, capture_requests=False, **kw).summary
    assert fast["completed_requests"] > 0
    assert_matches_exact(fast, exact)


@pytest.mark.parametrize("name", ["open_loop_poisson_lengths", "kv_pressure_preemption", "sglang"])
def test_forgetting_old_pass_ends_and_whole_requests_changes_nothing(name, monkeypatch):
    # Ranks drop pass ends no live decoder reads, and the report reads finished requests from
    # columns unless records are asked for: trimming at every chance, and either way, must give
    # the same metrics and records as keeping everything.
    kw = dict(SCENARIOS[name])
    workload = kw.pop("workload")
    kept = run(workload, **kw)
    monkeypatch.setattr(engine, "TRIM_PASSES", 2)
    trimmed = run(workload, **kw)
    columns_only = run(workload, capture_requests=False, **kw)
    assert trimmed.requests == kept.requests
    assert numeric(trimmed.summary) == numeric(kept.summary) == numeric(columns_only.summary)


def test_kv_pressure_scenario_really_preempts():
    kw = dict(SCENARIOS["kv_pressure_preemption"])
    assert run(kw.pop("workload"), **kw).summary["preemptions"] > 0


def test_same_seed_same_result_and_seeds_matter_where_random():
    workload = SyntheticWorkload(isl=500, osl=100, num_requests=80, request_rate=20, arrival="poisson")
    a = run(workload, seed=3, router="random", replicas=3).summary
    b = run(workload, seed=3, router="random", replicas=3).summary
    c = run(workload, seed=4, router="random", replicas=3).summary
    assert numeric(a) == numeric(b)
    assert numeric(a) != numeric(c)


def test_results_do_not_depend_on_the_process():
    code = (
        "from tests.replay.conftest import run;"
        "from aisimulate.workload import SyntheticWorkload as S;"
        "import json;"
        "s=run(S(isl=900,osl=60,num_requests=30,concurrency=8,shared_prefix_ratio=0.5,num_prefix_groups=2)).summary;"
        "print(json.dumps({k:v for k,v in s.items() if k!='wall_time_ms'}))"
    )
    root = Path(__file__).resolve().parents[2]
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True
        )
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1]


def test_closed_loop_never_exceeds_the_concurrency():
    rep = run(SyntheticWorkload(isl=300, osl=50, num_requests=60, concurrency=5), replicas=2)
    events = sorted(
        [(r["arrival_time_ms"], 1) for r in rep.requests] + [(r["last_token_ms"], -1) for r in rep.requests],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak == 5


def test_open_loop_constant_rate_arrivals():
    rep = run(SyntheticWorkload(isl=100, osl=5, num_requests=5, request_rate=4))
    assert [r["arrival_time_ms"] for r in rep.requests] == [0, 250, 500, 750, 1000]


def test_next_turn_arrives_after_the_previous_turn_and_its_delay():
    rep = run(
        SyntheticWorkload(
            isl=200, osl=20, num_requests=2, turns_per_session=3, request_rate=1, inter_turn_delay_ms=75
        )
    )
    by_session = {}
    for r in rep.requests:
        by_session.setdefault(r["session_id"], []).append(r)
    for turns in by_session.values():
        turns.sort(key=lambda r: r["turn_index"])
        for before, after in itertools.pairwise(turns):
            assert after["arrival_time_ms"] == pytest.approx(before["last_token_ms"] + 75)


def test_shared_prefix_groups_are_reused():
    workload = SyntheticWorkload(
        isl=2048, osl=10, num_requests=40, concurrency=4, shared_prefix_ratio=0.5, num_prefix_groups=2
    )
    assert run(workload).summary["prefix_cache_reused_ratio"] > 0.3


def test_kv_blocks_come_from_the_memory_model_unless_pinned():
    rep = run(burst(1, 100, 2), num_gpu_blocks=None)
    assert rep.summary["max_kv_usage_ratio"] == pytest.approx(2 / 13777, rel=0.2)


def test_timeline_and_records_are_opt_in():
    plan = DeploymentPlan(model="qwen3-8b", system="h100_sxm", agg=EngineSpec(replicas=2))
    workload = SyntheticWorkload(isl=500, osl=100, num_requests=30, request_rate=10)
    bare = simulate(plan, workload)
    assert bare.requests is None and bare.timeline is None
    full = simulate(plan, workload, capture_requests=True, capture_timeline=True, timeline_interval_ms=500)
    assert len(full.requests) == 30
    assert full.timeline[0]["time_ms"] == 0 and full.timeline[1]["time_ms"] == 500
    tokens = sum(row["output_tokens_per_s"] * 0.5 for row in full.timeline)
    assert tokens <= full.summary["total_output_tokens"]
    assert all(0 <= row["kv_usage_ratio"] <= 1 for row in full.timeline)


def test_attention_dp_ranks_and_gpu_accounting():
    plan = DeploymentPlan(
        model="Qwen/Qwen3-30B-A3B",
        system="h200_sxm",
        agg=EngineSpec(tp=1, attention_dp=2, moe_ep=2, replicas=2),
    )
    rep = simulate(
        plan, SyntheticWorkload(isl=500, osl=50, num_requests=40, concurrency=8), capture_requests=True
    )
    s = rep.summary
    assert s["decode_gpus_per_worker"] == 2
    assert s["gpu_hours"] == pytest.approx(2 * 2 * s["duration_ms"] / 3.6e6)
    assert {(r["worker_idx"], r["dp_rank"]) for r in rep.requests} == {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_least_loaded_router_spreads_load():
    rep = run(
        SyntheticWorkload(isl=400, osl=200, num_requests=40, concurrency=8), router="least_loaded", replicas=4
    )
    counts = {}
    for r in rep.requests:
        counts[r["worker_idx"]] = counts.get(r["worker_idx"], 0) + 1
    assert len(counts) == 4 and max(counts.values()) - min(counts.values()) <= 4


def test_trace_replay_counts_and_reuse():
    rep = run(TraceWorkload(trace_path=TRACE), replicas=8, capture_requests=False)
    s = rep.summary
    assert s["completed_requests"] == 400 and s["rejected_requests"] == 0
    assert 0 < s["prefix_cache_reused_ratio"] < 1
    assert math.isfinite(s["p99_ttft_ms"])


def test_shapes_that_cannot_run_are_reported():
    plan = DeploymentPlan(model="meta-llama/Llama-3.1-405B", system="h100_sxm", agg=EngineSpec(tp=8))
    with pytest.raises(InfeasibleError, match="weights need"):
        simulate(plan, burst(1, 100, 2))
    with pytest.raises(ConfigError, match="unknown model"):
        simulate(DeploymentPlan(model="llama-9", system="h100_sxm"), burst(1, 100, 2))


def _with_frontend(workload, latency_ms, **pools):
    deployment = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        frontend_latency_ms=latency_ms,
        **(pools or {"agg": EngineSpec(num_gpu_blocks=16384)}),
    )
    return simulate(deployment, workload, perf="polynomial", capture_requests=True)


def test_frontend_latency_adds_to_ttft_and_e2e_but_not_to_token_gaps():
    """One user, one request at a time: every request reaches the engine 40 ms after it was sent,
    so each TTFT and E2E grows by exactly that, the gaps between tokens do not, and the closed
    loop's next request leaves 40 ms later."""
    workload = SyntheticWorkload(isl=512, osl=32, num_requests=5, concurrency=1)
    base, slow = _with_frontend(workload, 0.0), _with_frontend(workload, 40.0)
    for a, b in zip(base.requests, slow.requests, strict=True):
        assert b["ttft_ms"] == pytest.approx(a["ttft_ms"] + 40.0)
        assert b["e2e_latency_ms"] == pytest.approx(a["e2e_latency_ms"] + 40.0)
    assert slow.summary["mean_itl_ms"] == pytest.approx(base.summary["mean_itl_ms"])
    assert slow.summary["duration_ms"] == pytest.approx(base.summary["duration_ms"] + 5 * 40.0)


def test_frontend_latency_reaches_the_prefill_pool_first_in_disagg():
    workload = SyntheticWorkload(isl=512, osl=16, num_requests=1, concurrency=1)
    pools = {
        "mode": "disagg",
        "prefill": EngineSpec(num_gpu_blocks=4096),
        "decode": EngineSpec(num_gpu_blocks=4096),
    }
    base, slow = _with_frontend(workload, 0.0, **pools), _with_frontend(workload, 25.0, **pools)
    assert slow.requests[0]["ttft_ms"] == pytest.approx(base.requests[0]["ttft_ms"] + 25.0)


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_plan_without_frontend_latency_replays_its_backends_calibrated_one(backend):
    """Unset, the frontend latency is the backend's fitted one (sglang 160 ms, the others 5 ms):
    a user's replay carries what the fidelity benchmark's replays do; set, the plan's wins."""
    from aisimulate.perf.calibration import e2e_frontend_latency_ms

    calibrated = e2e_frontend_latency_ms(backend)
    assert calibrated > 0
    workload = SyntheticWorkload(isl=512, osl=8, num_requests=2, concurrency=1)
    runs = {}
    for latency_ms in (None, 0.0, 7.0):
        plan = DeploymentPlan(
            model="meta-llama/Llama-3.1-8B",
            system="h200_sxm",
            backend=backend,
            frontend_latency_ms=latency_ms,
            agg=EngineSpec(num_gpu_blocks=4096),
        )
        runs[latency_ms] = simulate(plan, workload, perf="polynomial", capture_requests=True)
    assert runs[None].config["plan"]["frontend_latency_ms"] == calibrated
    assert runs[0.0].config["plan"]["frontend_latency_ms"] == 0.0
    assert runs[7.0].config["plan"]["frontend_latency_ms"] == 7.0
    for default, zero, seven in zip(runs[None].requests, runs[0.0].requests, runs[7.0].requests, strict=True):
        assert default["ttft_ms"] == pytest.approx(zero["ttft_ms"] + calibrated)
        assert seven["ttft_ms"] == pytest.approx(zero["ttft_ms"] + 7.0)


def test_negative_frontend_latency_is_rejected():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="frontend_latency_ms"):
        DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", frontend_latency_ms=-1)


@pytest.mark.parametrize("exact", [False, True])
def test_async_scheduling_admits_a_mid_pass_arrival_one_pass_later(exact):
    """vLLM's async scheduler chooses pass n+1 when pass n starts, so a request that arrives
    while pass n runs joins pass n+2: one decode pass later than a synchronous scheduler."""
    workload = SyntheticWorkload(isl=512, osl=200, num_requests=2, arrival_interval_ms=100.3)

    def second(async_scheduling):
        plan = DeploymentPlan(
            model="meta-llama/Llama-3.1-8B",
            system="h200_sxm",
            agg=EngineSpec(num_gpu_blocks=4096, async_scheduling=async_scheduling),
        )
        rep = simulate(plan, workload, perf="polynomial", exact=exact, capture_requests=True)
        return rep.requests[1], rep.requests[0]["itl_ms"]

    lagged, step_ms = second(True)
    prompt, _ = second(False)
    assert lagged["first_admit_ms"] - prompt["first_admit_ms"] == pytest.approx(step_ms, rel=0.05)
    assert lagged["ttft_ms"] > prompt["ttft_ms"]


def test_an_idle_async_engine_admits_at_once():
    workload = SyntheticWorkload(isl=512, osl=8, num_requests=3, concurrency=1)
    runs = [
        simulate(
            DeploymentPlan(
                model="meta-llama/Llama-3.1-8B",
                system="h200_sxm",
                agg=EngineSpec(num_gpu_blocks=4096, async_scheduling=flag, first_token_lag_passes=0),
            ),
            workload,
            perf="polynomial",
        ).summary
        for flag in (True, False)
    ]
    assert runs[0]["mean_ttft_ms"] == pytest.approx(runs[1]["mean_ttft_ms"])


@pytest.mark.parametrize(
    "deployment",
    [
        dict(
            agg=EngineSpec(replicas=2, num_gpu_blocks=400, num_g2_blocks=800, nextn=1),
            router={"mode": "kv_router"},
        ),
        dict(
            mode="disagg",
            backend="sglang",
            prefill=EngineSpec(num_gpu_blocks=400),
            decode=EngineSpec(num_gpu_blocks=400),
            kv_transfer_bandwidth_gbps=0,
        ),
    ],
)
def test_a_replay_leaves_no_reference_cycles(deployment):
    """Everything a replay builds is freed when it returns, with no help from the cyclic
    garbage collector (whose full walk of the heap would cost a good part of a replay)."""
    plan = DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", **deployment)
    workload = SyntheticWorkload(
        isl=700, osl=64, num_requests=16, concurrency=6, shared_prefix_ratio=0.5, num_prefix_groups=2
    )
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        simulate(plan, workload, perf="polynomial", capture_requests=True, capture_timeline=True)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    assert left == []


def test_an_async_vllm_engine_returns_the_first_token_a_pass_late_by_default():
    """The backend's fitted lag: one pass of the pass that computed the first token, only under
    asynchronous scheduling, overridable in the plan."""
    from aisimulate.catalog.backends import backend_profile
    from tests.replay.conftest import burst, run

    lag = backend_profile("vllm").async_first_token_lag_passes
    assert lag > 0 and backend_profile("sglang").async_first_token_lag_passes == 0

    def ttft(**engine):
        return run(burst(1, 1024, 4), capture_requests=False, **engine).summary["mean_ttft_ms"]

    pass_ms = ttft(first_token_lag_passes=0)
    assert ttft(first_token_lag_passes=None) == pytest.approx((1 + lag) * pass_ms)
    assert ttft(first_token_lag_passes=0.5) == pytest.approx(1.5 * pass_ms)
    # A synchronous engine emits it at the pass end whatever the setting.
    assert ttft(first_token_lag_passes=None, async_scheduling=False) == pytest.approx(
        ttft(first_token_lag_passes=0, async_scheduling=False)
    )
