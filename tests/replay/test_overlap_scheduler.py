"""TRT-LLM's overlap scheduler on aggregated workers: a request arriving during pass n joins pass
n + 2, a first token reaches the client part of a pass late, and less of an eager pass's launch
shows; disaggregated workers keep their own behaviour."""

import pytest

from aisimulate.catalog import get_model
from aisimulate.catalog.backends import backend_profile
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.workers import eager_pass_floor_ms
from aisimulate.workload import SyntheticWorkload
from tests.replay.conftest import burst, run

LAYERS = get_model("meta-llama/Llama-3.1-8B").num_layers
TRTLLM = backend_profile("trtllm")


def test_trtllm_alone_declares_an_overlap_scheduler_on_aggregated_workers():
    assert TRTLLM.overlap_first_token_lag_passes is not None and TRTLLM.overlap_first_token_lag_passes > 0
    assert 0 < TRTLLM.overlap_eager_layer_ms < TRTLLM.eager_layer_ms
    for name in ("vllm", "sglang"):
        assert backend_profile(name).overlap_first_token_lag_passes is None


def test_a_first_token_comes_the_backends_fraction_of_its_pass_late_overridable():
    def ttft(**engine):
        summary = run(burst(1, 1024, 4), backend="trtllm", capture_requests=False, **engine).summary
        return summary["mean_ttft_ms"]

    pass_ms = ttft(first_token_lag_passes=0)
    lag = TRTLLM.overlap_first_token_lag_passes
    assert ttft(first_token_lag_passes=None) == pytest.approx((1 + lag) * pass_ms)
    assert ttft(first_token_lag_passes=1.0) == pytest.approx(2 * pass_ms)


def test_a_request_arriving_mid_pass_joins_the_pass_after_next_on_trtllm_only():
    """The second request arrives while the first one's decode passes run: the overlap scheduler
    has already scheduled the next pass, so it is admitted one pass later than a synchronous
    scheduler (vLLM without asynchronous scheduling) would."""
    workload = SyntheticWorkload(isl=512, osl=200, num_requests=2, arrival_interval_ms=100.3)

    def second(backend):
        extra = {} if backend == "trtllm" else {"async_scheduling": False}
        plan = DeploymentPlan(
            model="meta-llama/Llama-3.1-8B",
            system="h200_sxm",
            backend=backend,
            agg=EngineSpec(num_gpu_blocks=4096, first_token_lag_passes=0, eager_layer_ms=0, **extra),
        )
        rep = simulate(plan, workload, perf="polynomial", capture_requests=True)
        return rep.requests[1]["first_admit_ms"], rep.requests[0]["itl_ms"]

    overlapped, step_ms = second("trtllm")
    synchronous, _ = second("vllm")
    arrival = workload.arrival_interval_ms
    assert synchronous - arrival < step_ms  # the next pass boundary
    assert overlapped - synchronous == pytest.approx(step_ms, rel=0.05)


def test_an_eager_pass_shows_less_launch_time_on_an_overlapped_worker_only():
    spec = EngineSpec(tp=2)  # a stage of several GPUs; one GPU has its own, lower bound
    assert eager_pass_floor_ms("trtllm", spec, 61, overlap=True) == pytest.approx(
        TRTLLM.overlap_eager_layer_ms * 61
    )
    assert eager_pass_floor_ms("trtllm", spec, 61) == pytest.approx(TRTLLM.eager_layer_ms * 61)
    one_gpu = EngineSpec()
    assert eager_pass_floor_ms("trtllm", one_gpu, 61, overlap=True) == pytest.approx(
        min(TRTLLM.overlap_eager_layer_ms, TRTLLM.eager_layer_ms_one_gpu) * 61
    )
    # A floor the plan sets holds on every worker.
    assert eager_pass_floor_ms("trtllm", EngineSpec(eager_layer_ms=2.0), 61, overlap=True) == 122.0


def test_disaggregated_context_workers_keep_the_full_floor_and_no_lag():
    """A context worker runs without the overlap scheduler (the recipes turn it off there): its
    lone short prompt replays as with the full floor and no lag set outright (TP2: a stage of
    several GPUs, whose floor is the full one)."""

    def ttft(**prefill):
        plan = DeploymentPlan(
            model="meta-llama/Llama-3.1-8B",
            system="h200_sxm",
            backend="trtllm",
            mode="disagg",
            prefill=EngineSpec(num_gpu_blocks=4096, tp=2, **prefill),
            decode=EngineSpec(num_gpu_blocks=4096),
            frontend_latency_ms=0,
        )
        return simulate(plan, burst(1, 64, 4), perf="polynomial").summary["mean_ttft_ms"]

    default = ttft()
    assert default == pytest.approx(ttft(eager_layer_ms=TRTLLM.eager_layer_ms, first_token_lag_passes=0))
    assert default > ttft(eager_layer_ms=TRTLLM.overlap_eager_layer_ms)
