"""Scaling decisions on hand-built forward-pass metrics."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aisimulate.planner.config import PlannerConfig
from aisimulate.planner.fpm import ForwardPassMetrics, PassRegression
from aisimulate.planner.policy import Planner, RoleCapability, RoleState, TrafficWindow

CAP = RoleCapability(
    gpus_per_engine=1,
    max_num_batched_tokens=1000,
    max_num_seqs=64,
    context_length=8000,
    max_kv_tokens=100_000,
)


def prefill_ms(tokens: float) -> float:
    return 10.0 + 0.1 * tokens  # 1000 tokens: 110 ms


def decode_ms(requests: float, kv: float) -> float:
    return 5.0 + 0.05 * requests + 0.0005 * kv  # 10 requests x 2000: 6.5 ms


def config(**kw) -> PlannerConfig:
    base = dict(
        load_min_observations=3, benchmark_granularity=0, ttft_ms=500.0, itl_ms=20.0, max_gpu_budget=8
    )
    return PlannerConfig(**(base | kw))


def prefill_fpm(queued_tokens: int, tokens: int = 500) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        wall_time_ms=prefill_ms(tokens),
        num_prefill_requests=1,
        sum_prefill_tokens=tokens,
        num_queued_prefill=queued_tokens // 500,
        sum_queued_prefill_tokens=queued_tokens,
    )


def decode_fpm(requests: int, kv: int) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        wall_time_ms=decode_ms(requests, kv), num_decode_requests=requests, sum_decode_kv_tokens=kv
    )


def learn(planner: Planner, role: str, fpms: list[ForwardPassMetrics], active: int) -> None:
    """Feed varied passes so the regression has something to fit (no decision expected)."""
    for i, fpm in enumerate(fpms):
        planner.tick(5000.0 * (i + 1), {role: RoleState(fpm=[fpm], active=active)}, TrafficWindow())


def prefill_planner(**kw) -> Planner:
    planner = Planner(config(**kw), {"prefill": CAP}, initial={"prefill": 2})
    learn(planner, "prefill", [prefill_fpm(0, t) for t in (100, 400, 700, 1000)], active=2)
    return planner


def at(planner: Planner) -> float:
    return planner.first_tick_ms()


class TestPrefillSla:
    def test_fit_recovers_the_pass_time(self):
        planner = prefill_planner()
        assert planner.roles["prefill"].pass_ms(600, 0, 0) == pytest.approx(prefill_ms(600))

    def test_scale_up_when_every_engine_misses_ttft(self):
        planner = prefill_planner()
        # 10 000 queued tokens: 10 chunks of 110 ms > 500 ms on both engines.
        state = RoleState(fpm=[prefill_fpm(10_000), prefill_fpm(9_000)], active=2)
        decision = planner.tick(at(planner), {"prefill": state}, TrafficWindow())
        assert decision.targets == {"prefill": 3}
        assert planner.stats.scale_ups == 1

    def test_hold_when_one_engine_is_fine(self):
        planner = prefill_planner()
        state = RoleState(fpm=[prefill_fpm(10_000), prefill_fpm(0)], active=2)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {}

    def test_scale_down_when_survivors_absorb_the_queue(self):
        planner = prefill_planner()
        state = RoleState(fpm=[prefill_fpm(0), prefill_fpm(0)], active=2)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {"prefill": 1}

    def test_no_scale_down_below_min_endpoint(self):
        planner = prefill_planner(prefill_min_endpoint=2)
        state = RoleState(fpm=[prefill_fpm(0), prefill_fpm(0)], active=2)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {}

    def test_sensitivity_zero_never_scales_down(self):
        planner = prefill_planner(load_scaling_down_sensitivity=0)
        state = RoleState(fpm=[prefill_fpm(1000), prefill_fpm(1000)], active=2)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {}

    def test_pending_startup_suppresses_scale_up(self):
        planner = prefill_planner()
        state = RoleState(fpm=[prefill_fpm(10_000), prefill_fpm(10_000)], active=2, starting=1)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {}

    def test_cold_start_holds(self):
        planner = Planner(config(), {"prefill": CAP}, initial={"prefill": 2})
        state = RoleState(fpm=[prefill_fpm(10_000), prefill_fpm(10_000)], active=2)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {}

    def test_budget_caps_scale_up(self):
        planner = prefill_planner(max_gpu_budget=2)
        state = RoleState(fpm=[prefill_fpm(10_000), prefill_fpm(10_000)], active=2)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {}

    def test_min_gpu_budget_pins_the_floor(self):
        planner = prefill_planner(min_gpu_budget=2)
        state = RoleState(fpm=[prefill_fpm(0), prefill_fpm(0)], active=2)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {}


class TestDecodeSla:
    def planner(self, **kw) -> Planner:
        planner = Planner(config(**kw), {"decode": CAP}, initial={"decode": 2})
        learn(
            planner,
            "decode",
            [decode_fpm(r, kv) for r, kv in ((4, 4000), (30, 10_000), (16, 30_000))],
            active=2,
        )
        return planner

    def test_fit_recovers_the_pass_time(self):
        planner = self.planner()
        assert planner.roles["decode"].pass_ms(0, 20, 20_000) == pytest.approx(
            decode_ms(20, 20_000), rel=1e-6
        )

    def test_scale_up_on_itl(self):
        planner = self.planner()
        # 60 requests on 40 000 tokens: 5 + 3 + 20 = 28 ms > 20 ms.
        state = RoleState(fpm=[decode_fpm(60, 40_000), decode_fpm(60, 40_000)], active=2)
        assert planner.tick(at(planner), {"decode": state}, TrafficWindow()).targets == {"decode": 3}

    def test_scale_down_when_light(self):
        planner = self.planner()
        state = RoleState(fpm=[decode_fpm(2, 1000), decode_fpm(2, 1000)], active=2)
        assert planner.tick(at(planner), {"decode": state}, TrafficWindow()).targets == {"decode": 1}

    def test_no_scale_down_when_kv_would_overflow(self):
        planner = self.planner(itl_ms=1000.0)
        state = RoleState(fpm=[decode_fpm(2, 60_000), decode_fpm(2, 60_000)], active=2)
        assert planner.tick(at(planner), {"decode": state}, TrafficWindow()).targets == {}


class TestStaticTargets:
    def test_throughput_target_on_queue_and_kv(self):
        planner = Planner(
            config(optimization_target="throughput"),
            {"prefill": CAP, "decode": CAP},
            initial={"prefill": 2, "decode": 2},
        )
        learn(planner, "prefill", [prefill_fpm(0)] * 3, active=2)
        busy = {
            "prefill": RoleState(fpm=[prefill_fpm(9000), prefill_fpm(0)], active=2),  # 9000/8000 >= 1
            "decode": RoleState(fpm=[decode_fpm(10, 55_000), decode_fpm(10, 55_000)], active=2),  # 0.55 < 0.6
        }
        # decode has no observations yet (cold start): only prefill moves.
        assert planner.tick(at(planner), busy, TrafficWindow()).targets == {"prefill": 3}

    @pytest.mark.parametrize(
        ("target", "kv", "expected"),
        [
            ("latency", 9000, {"decode": 1}),  # 0.09 < 0.1 down; 0.18 after consolidation <= 0.4 up
            ("throughput", 55_000, {}),  # 0.55 < 0.6 down; 1.1 after consolidation > 1.0 up
        ],
    )
    def test_scale_down_unless_the_survivor_would_cross_back(self, target, kv, expected):
        planner = Planner(config(optimization_target=target), {"decode": CAP}, initial={"decode": 2})
        learn(planner, "decode", [decode_fpm(1, 100)] * 3, active=2)
        state = RoleState(fpm=[decode_fpm(1, kv), decode_fpm(1, kv)], active=2)
        assert planner.tick(at(planner), {"decode": state}, TrafficWindow()).targets == expected

    def test_load_target_uses_raw_thresholds(self):
        planner = Planner(
            config(optimization_target="load", prefill_scale_up_queue_tokens=3000),
            {"prefill": CAP},
            initial={"prefill": 1},
        )
        learn(planner, "prefill", [prefill_fpm(0)] * 3, active=1)
        state = RoleState(fpm=[prefill_fpm(3000)], active=1)
        assert planner.tick(at(planner), {"prefill": state}, TrafficWindow()).targets == {"prefill": 2}


class TestThroughputScaling:
    def test_sizes_by_forecast_and_engine_capacity(self):
        cfg = config(
            enable_load_scaling=False,
            enable_throughput_scaling=True,
            load_predictor="constant",
            throughput_adjustment_interval_seconds=100,
            max_gpu_budget=20,
        )
        planner = Planner(cfg, {"prefill": CAP}, initial={"prefill": 1})
        planner.roles["prefill"].regression.add((0,), 10.0)
        for tokens in (250, 500, 1000):
            planner.roles["prefill"].regression.add((tokens,), prefill_ms(tokens))
        # 1000 requests of ISL 1000 in 100 s: 10 req/s. One engine at batch 1: 110 ms -> 9.1 rps.
        window = TrafficWindow(
            num_requests=1000, num_completed=1000, sum_input_tokens=1_000_000, sum_output_tokens=10_000
        )
        decision = planner.tick(100_000.0, {"prefill": RoleState(fpm=[], active=1)}, window)
        assert decision.targets == {"prefill": 2}
        assert decision.next_tick_ms == 200_000.0

    def test_change_per_tick_is_capped(self):
        cfg = config(
            enable_load_scaling=False,
            enable_throughput_scaling=True,
            load_predictor="constant",
            throughput_adjustment_interval_seconds=100,
            max_throughput_scaling_replicas=2,
            max_gpu_budget=50,
        )
        planner = Planner(cfg, {"prefill": CAP}, initial={"prefill": 1})
        for tokens in (250, 500, 1000):
            planner.roles["prefill"].regression.add((tokens,), prefill_ms(tokens))
        window = TrafficWindow(
            num_requests=10_000, num_completed=10, sum_input_tokens=10_000, sum_output_tokens=100
        )
        decision = planner.tick(100_000.0, {"prefill": RoleState(fpm=[], active=1)}, window)
        assert decision.targets == {"prefill": 3}


class TestBudget:
    def test_disagg_targets_shrink_proportionally(self):
        wide = RoleCapability(**{**CAP.__dict__, "gpus_per_engine": 2})
        planner = Planner(
            config(max_gpu_budget=12), {"prefill": wide, "decode": wide}, initial={"prefill": 2, "decode": 4}
        )
        assert planner._fit_budget({"prefill": 4, "decode": 8}) == {"prefill": 2, "decode": 4}
        assert planner._fit_budget({"prefill": 1, "decode": 1}) == {"prefill": 1, "decode": 1}


class TestRegression:
    def test_retention_drops_the_oldest_of_the_fullest_bucket(self):
        fit = PassRegression(1, max_samples=4, bucket_size=4, min_observations=2)
        for x in (0.0, 100.0, 1.0, 2.0):
            fit.add((x,), 1.0 + x)
        fit.add((3.0,), 4.0)  # buckets over [0, 100]: the first holds 0, 1, 2, 3 -> 0 goes
        assert sorted(x for (x,) in fit._x) == [1.0, 2.0, 3.0, 100.0]

    def test_coefficients_are_never_negative(self):
        fit = PassRegression(1, max_samples=8, bucket_size=4, min_observations=2)
        for x, y in ((0, 10.0), (10, 8.0), (20, 6.0)):
            fit.add((x,), y)
        assert (fit.coefficients >= 0).all()

    def test_idle_passes_are_not_samples(self):
        fit = PassRegression(1, max_samples=8, bucket_size=4, min_observations=1)
        fit.add((5.0,), 0.0)
        assert len(fit) == 0 and not fit.ready


class TestConfig:
    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("fpm_sample_bucket_size", 10, "perfect square"),
            ("load_scaling_down_sensitivity", 120, "less than or equal to 100"),
            ("load_scaling_down_sensitivity", -1, "greater than or equal to 0"),
            ("load_predictor", "lstm", "load_predictor"),
        ],
    )
    def test_bad_values(self, field, value, message):
        with pytest.raises(ValidationError, match=message):
            PlannerConfig(**{field: value})

    def test_throughput_scaling_needs_sla_target(self):
        with pytest.raises(ValidationError, match="optimization_target: sla"):
            PlannerConfig(enable_throughput_scaling=True, optimization_target="throughput")

    def test_foreign_predictor_knob_is_rejected(self):
        with pytest.raises(ValidationError, match="only load_predictor 'kalman'"):
            PlannerConfig(load_predictor="constant", kalman_r=3.0)

    def test_a_planner_needs_a_loop(self):
        with pytest.raises(ValueError, match="enable_load_scaling or enable_throughput_scaling"):
            Planner(PlannerConfig(enable_load_scaling=False), {"agg": CAP}, initial={"agg": 1})
