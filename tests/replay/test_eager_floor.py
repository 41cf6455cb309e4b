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
        summary = run(burst(1, 8000, 4), backend="trtllm", perf="analytic", **engine).summary
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
    assert eager_pass_floor_ms("trtllm", EngineSpec(), 61) == pytest.approx(default)
