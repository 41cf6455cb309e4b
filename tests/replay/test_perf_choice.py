"""The report names the latency provider that ran, including what ``perf: auto`` picked."""

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
