"""A pass with prompt tokens that runs without CUDA graphs lasts at least its layers' host time
(TRT-LLM: its graphs capture generation-only batches)."""

import pytest

from aisimulate.catalog import get_model
from aisimulate.catalog.backends import BACKEND_PROFILES, backend_profile
from aisimulate.replay import EngineSpec
from aisimulate.replay.workers import eager_pass_floor_ms
from tests.replay.conftest import burst, run

LAYERS = get_model("meta-llama/Llama-3.1-8B").num_layers


def _summary(**engine):
    engine.setdefault("tp", 2)  # a stage of several GPUs: the floor fitted on such workers
    return run(burst(1, 64, 8), backend="trtllm", perf="analytic", **engine).summary


def test_only_trtllm_runs_passes_with_prompts_eagerly():
    assert backend_profile("trtllm").eager_layer_ms > 0
    assert backend_profile("trtllm").cuda_graphs.pads == "decode"  # its graphs: decode-only batches
    assert [name for name, p in BACKEND_PROFILES.items() if p.eager_layer_ms] == ["trtllm"]


def test_a_short_prompt_takes_the_eager_floor_and_its_decode_passes_do_not():
    # An aggregated worker runs TRT-LLM's overlap scheduler: its floor is the overlapped one.
    per_layer = backend_profile("trtllm").overlap_eager_layer_ms
    graphed = _summary(eager_layer_ms=0)
    eager = _summary()  # the backend's default
    # A 64-token prompt alone costs the GPU far less than launching 32 layers from the host.
    assert graphed["mean_ttft_ms"] < per_layer * LAYERS / 2
    assert eager["mean_ttft_ms"] == pytest.approx(per_layer * LAYERS)
    assert _summary(eager_layer_ms=3.0)["mean_ttft_ms"] == pytest.approx(3.0 * LAYERS)
    # The decode-only passes after it replay their CUDA graphs: the token gaps do not move.
    assert eager["mean_tpot_ms"] == pytest.approx(graphed["mean_tpot_ms"])


def test_a_pass_the_gpu_takes_longer_than_the_floor_keeps_its_price():
    def ttft(**engine):
        summary = run(burst(1, 8000, 4), backend="trtllm", perf="analytic", tp=2, **engine).summary
        return summary["mean_ttft_ms"]

    graphed = ttft(eager_layer_ms=0)
    assert graphed > backend_profile("trtllm").eager_layer_ms * LAYERS
    assert ttft() == pytest.approx(graphed)


def test_the_floor_counts_the_layers_of_one_pipeline_stage():
    spec = EngineSpec(eager_layer_ms=2.0)
    assert eager_pass_floor_ms("trtllm", spec, 61) == 122.0
    assert eager_pass_floor_ms("trtllm", spec.model_copy(update={"pp": 2}), 61) == 62.0  # 31 layers
    assert eager_pass_floor_ms("vllm", EngineSpec(), 61) == 0.0
    default = backend_profile("trtllm").eager_layer_ms * 61
    assert eager_pass_floor_ms("trtllm", EngineSpec(tp=4), 61) == pytest.approx(default)


def test_a_stage_of_one_gpu_takes_its_own_lower_floor():
    profile = backend_profile("trtllm")
    assert 0 < profile.eager_layer_ms_one_gpu < profile.eager_layer_ms
    one_gpu = profile.eager_layer_ms_one_gpu * 36
    assert eager_pass_floor_ms("trtllm", EngineSpec(), 36) == pytest.approx(one_gpu)
    # Pipeline stages of one GPU each are one-GPU stages; tensor parallelism or attention DP
    # puts collectives in every layer and takes the several-GPU floor.
    assert eager_pass_floor_ms("trtllm", EngineSpec(pp=2), 36) == pytest.approx(one_gpu / 2)
    several = profile.eager_layer_ms * 36
    assert eager_pass_floor_ms("trtllm", EngineSpec(tp=2), 36) == pytest.approx(several)
    spec = EngineSpec(attention_dp=2, moe_tp=1, moe_ep=2)
    assert eager_pass_floor_ms("trtllm", spec, 36) == pytest.approx(several)
    # A plan's own value holds on any stage.
    assert eager_pass_floor_ms("trtllm", EngineSpec(eager_layer_ms=2.0), 36) == 72.0
    # The rows it stands for: at one user a 1k prompt's context pass on one GPU keeps the price
    # of its kernels (16.7 ms for gpt-oss-120b's 36 layers on gb200), which the floor stays under.
    assert one_gpu < 16.7


def test_a_one_gpu_short_prompt_replays_at_the_one_gpu_floor():
    one_gpu = backend_profile("trtllm").eager_layer_ms_one_gpu
    ttft = run(burst(1, 64, 8), backend="trtllm", perf="analytic", tp=1).summary["mean_ttft_ms"]
    graphed = _summary(tp=1, eager_layer_ms=0)["mean_ttft_ms"]
    assert graphed < one_gpu * LAYERS  # the GPU's part alone is under the floor
    assert ttft == pytest.approx(one_gpu * LAYERS)
