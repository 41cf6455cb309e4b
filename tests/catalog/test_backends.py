"""The backend registry is the one list of backends: every layer accepts exactly its entries."""

from __future__ import annotations

from typing import get_args

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.backends import BACKEND_PROFILES, BACKENDS, Backend, backend_profile
from aisimulate.errors import ConfigError
from aisimulate.fidelity import cases
from aisimulate.perf.calibration import calibration_for
from aisimulate.perf.memory import check_backend, estimate_memory
from aisimulate.perf.providers import async_scheduling_for
from aisimulate.perf.shape import ParallelShape
from aisimulate.replay import DeploymentPlan
from aisimulate.replay.scheduler import POLICIES
from aisimulate.replay.workers import RANK_CLASSES
from aisimulate.spica import artifacts
from aisimulate.spica.knobs import SEARCH_CHOICES


def test_every_layer_accepts_exactly_the_registered_backends():
    assert get_args(Backend) == BACKENDS == tuple(BACKEND_PROFILES)
    assert get_args(DeploymentPlan.model_fields["backend"].annotation) == BACKENDS
    assert cases.BACKENDS == BACKENDS
    assert SEARCH_CHOICES["backend"] == BACKENDS
    assert set(artifacts.ENGINE_ARGS) == set(BACKENDS)
    assert {p.admission for p in BACKEND_PROFILES.values()} == set(POLICIES)
    assert {p.passes for p in BACKEND_PROFILES.values()} <= set(RANK_CLASSES)
    assert {p.kernel_backend for p in BACKEND_PROFILES.values()} <= set(BACKENDS)
    for name, profile in BACKEND_PROFILES.items():
        assert profile.name == name and check_backend(name) == name


def test_an_unknown_backend_is_one_config_error_in_every_layer():
    with pytest.raises(ConfigError, match="backend must be one of vllm, sglang, trtllm"):
        backend_profile("tgi")
    with pytest.raises(ConfigError, match="backend must be one of"):
        check_backend("tgi")
    with pytest.raises(ValueError, match="backend"):
        DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", backend="tgi")


def test_the_profile_drives_memory_async_kernels_and_launch():
    model, system, shape = get_model("meta-llama/Llama-3.1-8B"), get_system("h200_sxm"), ParallelShape(tp=1)
    budget = {
        b: estimate_memory(model, system, shape, backend=b, gpu_memory_utilization=0.9) for b in BACKENDS
    }
    # A fraction of everything (vLLM), of weights and KV (SGLang), of what is free (TRT-LLM).
    assert len({e.kv_budget_bytes_per_gpu for e in budget.values()}) == 3
    assert [async_scheduling_for(b, None) for b in BACKENDS] == [
        BACKEND_PROFILES[b].async_switch for b in BACKENDS
    ]
    sglang, vllm = calibration_for(system, "sglang"), calibration_for(system, "vllm")
    assert sglang.gemm == vllm.gemm  # SGLang is priced with vLLM's kernel fits
    role = dict(
        max_num_seqs=8,
        max_num_batched_tokens=8192,
        gpu_memory_utilization=0.9,
        block_size=64,
        enable_prefix_caching=True,
    )
    shape_keys = dict(tp=1, attention_dp=1, moe_ep=1, replicas=1)
    sample = {"deployment_mode": "disagg", "backend": "trtllm", "model_name": "m", "context_length": 4096}
    for r in ("prefill", "decode"):
        sample |= {f"{r}_{k}": v for k, v in (role | shape_keys).items()}
    script = artifacts.launch_commands(sample)
    assert "trtllm-serve m" in script and "--max_seq_len 4096" in script
    manifest = artifacts.dynamo_graph_deployment(sample, "x")
    assert "TrtllmPrefillWorker" in manifest and "dynamo.trtllm" in manifest
    assert "--is-prefill-worker" not in manifest
    vllm_manifest = artifacts.dynamo_graph_deployment({**sample, "backend": "vllm"}, "x")
    assert "--is-prefill-worker" in vllm_manifest and "--max-model-len" in vllm_manifest


def test_trtllm_runs_mxfp4_experts_as_w4a8_on_blackwell_only():
    trtllm = backend_profile("trtllm")
    assert trtllm.expert_kernel_format("mxfp4", get_system("gb200").sm_version) == "mxfp4_mxfp8"
    assert trtllm.expert_kernel_format("mxfp4", get_system("h100_sxm").sm_version) == "mxfp4"
    assert trtllm.expert_kernel_format("nvfp4", get_system("gb200").sm_version) == "nvfp4"
    for other in ("vllm", "sglang"):  # their Blackwell MXFP4 kernels keep bf16 activations
        assert backend_profile(other).expert_kernel_format("mxfp4", 100) == "mxfp4"


def test_trtllm_prices_weight_bound_tensor_split_fp8_block_experts_as_expert_parallel_on_blackwell():
    trtllm = backend_profile("trtllm")
    blackwell, hopper = get_system("b300_sxm").sm_version, get_system("h100_sxm").sm_version
    assert trtllm.expert_parallel_price_up_to_tokens("fp8_block", blackwell) == 512
    assert trtllm.expert_parallel_price_up_to_tokens("fp8_block", hopper) == 0
    assert trtllm.expert_parallel_price_up_to_tokens("nvfp4", blackwell) == 0
    for other in ("vllm", "sglang"):
        assert backend_profile(other).expert_parallel_price_up_to_tokens("fp8_block", blackwell) == 0
