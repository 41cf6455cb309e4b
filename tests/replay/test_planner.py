"""The planner inside the replay: worker lifecycle, billing, report keys, determinism, YAML."""

from __future__ import annotations

import itertools

import pytest

from aisimulate.errors import ConfigError
from aisimulate.replay import SLA, DeploymentPlan, simulate
from aisimulate.replay.config import load_replay_config
from aisimulate.workload import SyntheticWorkload

# Thresholds that always say "up" (any queue >= 0 tokens) or always "down" (nothing reaches them).
ALWAYS_UP = dict(optimization_target="load", prefill_scale_up_queue_tokens=0, decode_scale_down_kv_rate=0)
ALWAYS_DOWN = dict(
    optimization_target="load",
    prefill_scale_up_queue_tokens=1e12,
    prefill_scale_down_queue_tokens=1e12,
    decode_scale_up_kv_rate=100,
    decode_scale_down_kv_rate=100,
)


def steady(seconds: float, rate: float = 20.0) -> SyntheticWorkload:
    return SyntheticWorkload(isl=512, osl=64, num_requests=int(seconds * rate), request_rate=rate)


def plan(replicas: int, planner: dict, **engine) -> DeploymentPlan:
    return DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        agg={"replicas": replicas, "num_gpu_blocks": 16384, **engine},
        planner={"load_min_observations": 1, "benchmark_granularity": 0, **planner},
    )


def rows(report, *keys):
    return [tuple(row[k] for k in ("time_ms", *keys)) for row in report.replicas]


def test_scale_up_starts_a_billed_worker_that_serves_after_startup_time():
    report = simulate(plan(1, {**ALWAYS_UP, "max_gpu_budget": 2}, startup_time=10.0), steady(30))
    assert rows(report, "active", "starting", "draining") == [
        (0.0, 1, 0, 0),
        (5000.0, 1, 1, 0),  # decided at the first tick, billed from now
        (15000.0, 2, 0, 0),  # serving after startup_time; the 10 s tick held (capacity pending)
    ]
    s = report.summary
    duration_s = s["duration_ms"] / 1000.0
    assert s["decode_worker_seconds"] == pytest.approx(duration_s + (duration_s - 5.0))
    assert s["gpu_hours"] == pytest.approx(s["decode_worker_seconds"] / 3600.0)
    assert s["avg_gpu"] == pytest.approx(2.0 - 5.0 / duration_s)
    assert s["planner_scale_ups"] == 1 and s["planner_scale_downs"] == 0
    assert s["planner_total_ticks"] >= 6
    assert s["completed_requests"] == s["num_requests"]


def test_new_worker_takes_requests_only_once_active():
    report = simulate(
        plan(1, {**ALWAYS_UP, "max_gpu_budget": 2}, startup_time=10.0), steady(30), capture_requests=True
    )
    late = [r for r in report.requests if r["worker_idx"] == 1]
    assert late and min(r["arrival_time_ms"] for r in late) >= 15000.0


def test_scale_down_drains_then_removes():
    report = simulate(plan(3, ALWAYS_DOWN), steady(20, rate=40.0), capture_requests=True)
    series = rows(report, "active", "draining")
    assert series[0] == (0.0, 3, 0)
    assert series[-1][1:] == (1, 0)  # down to min_endpoint, nothing left draining
    assert any(draining for _, _, draining in series)  # a worker held work when told to go
    s = report.summary
    assert s["planner_scale_downs"] == 2 and s["completed_requests"] == s["num_requests"]
    # A draining worker takes nothing new: no request reaches worker 2 after it was told to go.
    told = next(row["time_ms"] for row in report.planner_events if row["to"] == 2)
    gone = {r["worker_idx"] for r in report.requests if r["arrival_time_ms"] > told}
    assert len(gone) == 2
    assert s["avg_gpu"] < 3.0


def test_min_endpoint_holds_the_floor():
    report = simulate(plan(3, {**ALWAYS_DOWN, "min_endpoint": 2}), steady(20))
    assert rows(report, "active")[-1][1] == 2


def test_deterministic():
    first = simulate(plan(2, {**ALWAYS_UP, "max_gpu_budget": 4}, startup_time=2.0), steady(15), seed=3)
    second = simulate(plan(2, {**ALWAYS_UP, "max_gpu_budget": 4}, startup_time=2.0), steady(15), seed=3)
    drop = ("wall_time_ms",)
    assert {k: v for k, v in first.summary.items() if k not in drop} == {
        k: v for k, v in second.summary.items() if k not in drop
    }
    assert first.replicas == second.replicas and first.planner_events == second.planner_events


def test_sla_planner_shrinks_an_over_provisioned_fleet_and_keeps_goodput():
    sla = SLA(ttft_ms=2000, itl_ms=50)
    workload = steady(60, rate=5.0)
    fixed = DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", agg={"replicas": 4})
    planned = fixed.model_copy(update={"planner": plan(4, {"ttft_ms": 2000, "itl_ms": 50}).planner})
    base = simulate(fixed, workload, sla=sla).summary
    scaled = simulate(planned, workload, sla=sla).summary
    assert scaled["planner_scale_downs"] >= 1
    assert scaled["avg_gpu"] < base["avg_gpu"]
    assert scaled["goodput_request_throughput_rps"] >= 0.9 * base["goodput_request_throughput_rps"]


def test_disagg_roles_scale_separately():
    disagg = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        mode="disagg",
        prefill={"replicas": 2, "num_gpu_blocks": 16384},
        decode={"replicas": 2, "num_gpu_blocks": 16384},
        planner={"load_min_observations": 1, "benchmark_granularity": 0, **ALWAYS_DOWN},
    )
    report = simulate(disagg, steady(20))
    last = {row["role"]: row["active"] for row in report.replicas}
    assert last == {"prefill": 1, "decode": 1}
    s = report.summary
    assert s["prefill_worker_seconds"] < 2 * s["duration_ms"] / 1000.0
    assert s["completed_requests"] == s["num_requests"]


def test_yaml_planner_block(tmp_path):
    path = tmp_path / "replay.yaml"
    path.write_text(
        "deployment:\n"
        "  model: meta-llama/Llama-3.1-8B\n"
        "  system: h200_sxm\n"
        "  agg: {replicas: 2, startup_time: 30}\n"
        "  planner:\n"
        "    enable_throughput_scaling: true\n"
        "    load_predictor: kalman\n"
        "    throughput_adjustment_interval_seconds: 60\n"
        "workload: {isl: 128, osl: 16, num_requests: 10, request_rate: 5}\n"
    )
    config = load_replay_config(path)
    assert config.plan.planner is not None and config.plan.planner.load_predictor == "kalman"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("    fpm_sample_bucket_size: 10", "perfect square"),
        ("    load_scaling_down_sensitivity: 150", "less than or equal to 100"),
        ("    load_predictor: lstm", "load_predictor"),
        ("    bogus_key: 1", "bogus_key"),
    ],
)
def test_yaml_planner_errors_name_the_field_and_line(tmp_path, line, message):
    path = tmp_path / "replay.yaml"
    path.write_text(
        "deployment:\n"
        "  model: meta-llama/Llama-3.1-8B\n"
        "  system: h200_sxm\n"
        "  planner:\n"
        f"{line}\n"
        "workload: {isl: 128, osl: 16, num_requests: 10, request_rate: 5}\n"
    )
    with pytest.raises(ConfigError, match=message) as err:
        load_replay_config(path)
    assert "deployment.planner" in str(err.value) and "replay.yaml" in str(err.value)


def test_sla_planner_grows_an_overloaded_fleet_one_worker_per_startup():
    sla = SLA(ttft_ms=1000, itl_ms=30)
    workload = SyntheticWorkload(isl=2048, osl=256, num_requests=60 * 40, request_rate=60)
    fixed = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B", system="h200_sxm", agg={"replicas": 1, "startup_time": 10}
    )
    planned = fixed.model_copy(
        update={"planner": plan(1, {"ttft_ms": 1000, "itl_ms": 30, "max_gpu_budget": 4}).planner}
    )
    base = simulate(fixed, workload, sla=sla).summary
    report = simulate(planned, workload, sla=sla)
    ups = [row for row in report.planner_events if row["to"] > row["from"]]
    assert [row["to"] for row in ups] == [2, 3, 4]  # one at a time, capped by the budget
    gaps = [b["time_ms"] - a["time_ms"] for a, b in itertools.pairwise(ups)]
    assert min(gaps) >= 10_000.0  # no new worker while one is starting
    assert report.summary["goodput_request_throughput_rps"] > base["goodput_request_throughput_rps"]
    assert report.summary["median_ttft_ms"] < base["median_ttft_ms"]


def test_ticks_continue_while_a_next_turn_waits_out_its_delay():
    # One session at a time: between turns nothing is in flight, yet a turn is still to come.
    sessions = SyntheticWorkload(
        isl=256, osl=16, num_requests=1, request_rate=1, turns_per_session=3, inter_turn_delay_ms=20_000
    )
    report = simulate(plan(1, ALWAYS_DOWN), sessions)
    s = report.summary
    assert s["completed_requests"] == 3
    assert s["planner_total_ticks"] >= s["duration_ms"] // 5000
