import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import InfeasibleError
from aisimulate.perf.memory import (
    MAX_MEMORY_FRACTION,
    estimate_memory,
    kv_bytes_per_token_per_gpu,
    sglang_default_memory_fraction,
    weights_bytes_per_gpu,
)
from aisimulate.perf.shape import ParallelShape

GIB = 2**30
H200 = get_system("h200_sxm")


def test_llama_8b_tp1_reference():
    e = estimate_memory(get_model("meta-llama/Llama-3.1-8B"), H200, ParallelShape(tp=1))
    assert e.weights_bytes_per_gpu / GIB == pytest.approx(15.0, rel=0.1)
    assert e.kv_bytes_per_token_per_gpu == 131072
    assert e.kv_tokens_per_rank == pytest.approx(883_000, rel=0.1)
    assert e.num_gpu_blocks == e.kv_tokens_per_rank // 64
    assert e.feasible


def test_llama_70b_tp4_reference():
    e = estimate_memory(get_model("meta-llama/Llama-3.1-70B"), H200, ParallelShape(tp=4))
    assert e.weights_bytes_per_gpu / GIB == pytest.approx(32.9, rel=0.1)
    assert e.kv_bytes_per_token_per_gpu == 81920
    assert e.kv_tokens_per_rank == pytest.approx(1_170_000, rel=0.1)


def test_deepseek_v3_tp8_ep8_reference():
    e = estimate_memory(
        get_model("deepseek-ai/DeepSeek-V3"),
        H200,
        ParallelShape(tp=8, moe_ep=8),
        backend="trtllm",
        kv_cache_dtype="fp8",
    )
    assert e.kv_bytes_per_token_per_gpu == 35136
    assert e.weights_bytes_per_gpu / GIB == pytest.approx(84.6, rel=0.1)
    # AIConfigurator reports 1.40M; we hold 5 GiB less weight per GPU than it does, which no
    # split of the 642 GiB checkpoint over 8 GPUs can occupy (docs/perf.md explains).
    assert e.kv_tokens_per_rank == pytest.approx(1_400_000, rel=0.12)
    checkpoint_share = get_model("deepseek-ai/DeepSeek-V3").weight_bytes / 8
    assert checkpoint_share <= e.weights_bytes_per_gpu <= checkpoint_share * 1.05


def test_weights_that_do_not_fit_are_infeasible_not_negative():
    e = estimate_memory(get_model("meta-llama/Llama-3.1-405B"), get_system("h100_sxm"), ParallelShape(tp=8))
    assert not e.feasible
    assert "weights need" in e.reason
    assert e.kv_tokens_per_rank == 0 and e.num_gpu_blocks == 0 and e.kv_budget_bytes_per_gpu >= 0


def test_short_max_model_len_makes_a_tight_shape_feasible():
    model = get_model("meta-llama/Llama-3.1-70B")
    tight = estimate_memory(model, get_system("h100_sxm"), ParallelShape(tp=2), gpu_memory_utilization=0.9)
    assert not tight.feasible and "max_model_len" in tight.reason
    short = estimate_memory(model, get_system("h100_sxm"), ParallelShape(tp=2), max_model_len=8192)
    assert short.feasible


@pytest.mark.parametrize(
    ("name", "shape", "match"),
    [
        ("Qwen/Qwen3-32B", ParallelShape(tp=3), "num_heads % tp"),
        ("Qwen/Qwen3-30B-A3B", ParallelShape(tp=2, moe_tp=1, moe_ep=2, attention_dp=1), None),
        ("deepseek-ai/DeepSeek-V3", ParallelShape(tp=8, moe_ep=3), "moe_tp \\* moe_ep"),
        ("meta-llama/Llama-3.1-8B", ParallelShape(tp=1, attention_dp=2), "need an MoE model"),
    ],
)
def test_splits_that_do_not_divide_raise(name, shape, match):
    model = get_model(name)
    if match is None:
        assert estimate_memory(model, H200, shape).feasible
        return
    with pytest.raises(InfeasibleError, match=match):
        estimate_memory(model, H200, shape)


def test_trtllm_takes_a_fraction_of_free_memory():
    model = get_model("meta-llama/Llama-3.1-8B")
    vllm = estimate_memory(model, H200, ParallelShape(), backend="vllm", gpu_memory_utilization=0.9)
    trt = estimate_memory(model, H200, ParallelShape(), backend="trtllm", gpu_memory_utilization=0.9)
    non_kv = vllm.weights_bytes_per_gpu + vllm.activation_bytes_per_gpu + vllm.runtime_overhead_bytes_per_gpu
    assert vllm.kv_budget_bytes_per_gpu == pytest.approx(0.9 * H200.hbm_bytes - non_kv)
    assert trt.kv_budget_bytes_per_gpu == pytest.approx(0.9 * (H200.hbm_bytes - non_kv))


def test_mla_kv_is_not_split_by_tp_but_gqa_is():
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert kv_bytes_per_token_per_gpu(
        ds, ParallelShape(tp=4, moe_ep=4), "bf16"
    ) == kv_bytes_per_token_per_gpu(ds, ParallelShape(tp=8, moe_ep=8), "bf16")
    llama = get_model("meta-llama/Llama-3.1-70B")
    assert kv_bytes_per_token_per_gpu(llama, ParallelShape(tp=8), "bf16") == 327680 / 8


def test_kv_heads_replicate_when_tp_exceeds_them():
    qwen = get_model("Qwen/Qwen3-30B-A3B")  # 4 KV heads
    assert kv_bytes_per_token_per_gpu(qwen, ParallelShape(tp=8), "bf16") == kv_bytes_per_token_per_gpu(
        qwen, ParallelShape(tp=4), "bf16"
    )


def test_pp_splits_layers_and_their_kv():
    llama = get_model("meta-llama/Llama-3.1-70B")
    one = kv_bytes_per_token_per_gpu(llama, ParallelShape(tp=4), "bf16")
    two = kv_bytes_per_token_per_gpu(llama, ParallelShape(tp=4, pp=2), "bf16")
    assert two == one / 2
    assert weights_bytes_per_gpu(llama, ParallelShape(tp=4, pp=2)) < weights_bytes_per_gpu(
        llama, ParallelShape(tp=4)
    )


def test_gpt_oss_reserves_sliding_window_per_sequence():
    e = estimate_memory(get_model("openai/gpt-oss-120b"), H200, ParallelShape(), max_num_seqs=256)
    assert e.sliding_kv_bytes_per_gpu == pytest.approx(
        get_model("openai/gpt-oss-120b").sliding_kv_bytes_per_sequence("bf16") * 256
    )
    assert e.feasible


def test_mtp_adds_weights():
    ds = get_model("deepseek-ai/DeepSeek-V3")
    shape = ParallelShape(tp=8, moe_ep=8)
    assert weights_bytes_per_gpu(ds, shape, nextn=1) > weights_bytes_per_gpu(ds, shape)


@given(tp=st.sampled_from([1, 2, 4, 8]))
def test_tp_reduces_weights_per_gpu(tp):
    llama = get_model("meta-llama/Llama-3.1-70B")
    if tp > 1:
        assert weights_bytes_per_gpu(llama, ParallelShape(tp=tp)) < weights_bytes_per_gpu(
            llama, ParallelShape(tp=tp // 2)
        )


@settings(max_examples=30)
@given(
    util=st.floats(min_value=0.5, max_value=0.95),
    tokens=st.sampled_from([2048, 8192, 16384]),
)
def test_kv_capacity_falls_with_weights(util, tokens):
    bf16 = get_model("meta-llama/Llama-3.1-8B")
    fp8 = get_model("nvidia/Llama-3.1-8B-Instruct-FP8")
    kw = dict(gpu_memory_utilization=util, max_num_batched_tokens=tokens, kv_cache_dtype="bf16")
    heavy = estimate_memory(bf16, H200, ParallelShape(), **kw)
    light = estimate_memory(fp8, H200, ParallelShape(), **kw)
    assert light.weights_bytes_per_gpu < heavy.weights_bytes_per_gpu
    assert light.kv_tokens_per_rank > heavy.kv_tokens_per_rank
    more = estimate_memory(
        bf16, H200, ParallelShape(), **{**kw, "gpu_memory_utilization": min(util + 0.04, 1.0)}
    )
    assert more.kv_tokens_per_rank > heavy.kv_tokens_per_rank


GB200 = get_system("gb200")
DEP4_EXPERTS_TP4 = ParallelShape(tp=1, attention_dp=4, moe_tp=4, moe_ep=1)


@pytest.mark.parametrize(
    ("system", "tp_size", "dp_size", "expected"),
    [
        # 185.03 GiB = 189,471 MiB: chunk 16384, graphs up to 512; reserved 512 + 24,576 + 1,024
        # + 4/8 x 1,024 + 512 x 4 x 3 + 512 x 4 x 1.5 = 35,840 MiB -> (189,471 - 35,840) / 189,471.
        ("gb200", 4, 4, 0.811),
        # 81,920 MiB: chunk 8192, graphs up to 256 below tp 4; reserved 512 + 12,288 + 512 + 128.
        ("h100_sxm", 1, 1, 0.836),
        # tp 8: graphs up to 512, reserved 512 + 12,288 + 1,024 + 1,024 = 14,848 MiB.
        ("h100_sxm", 8, 1, 0.819),
        # 46,070 MiB: chunk 4096, graphs up to 32; 512 + 6,144 + 64 + 128 = 6,848 MiB (no 10 GiB
        # floor below 60 GiB).
        ("l40s", 1, 1, 0.851),
    ],
)
def test_sglang_default_fraction_is_its_server_args_formula(system, tp_size, dp_size, expected):
    mib = get_system(system).hbm_bytes / 2**20
    assert sglang_default_memory_fraction(mib, tp_size=tp_size, dp_size=dp_size) == expected


def test_each_backend_starts_from_its_own_default_fraction():
    model = get_model("Qwen/Qwen3-32B")
    h100 = get_system("h100_sxm")
    sglang = estimate_memory(model, h100, ParallelShape(), backend="sglang", max_model_len=8192)
    assert (sglang.memory_fraction, sglang.memory_fraction_raised) == (0.836, False)
    nccl = sglang.runtime_overhead_bytes_per_gpu - h100.runtime_overhead_gib * GIB
    # mem_fraction_static bounds weights + KV; activations and CUDA graphs live in the rest.
    assert sglang.kv_budget_bytes_per_gpu == pytest.approx(
        (h100.hbm_bytes - nccl) * 0.836 - sglang.weights_bytes_per_gpu
    )
    for backend in ("vllm", "trtllm"):
        assert (
            estimate_memory(model, h100, ParallelShape(), backend=backend, max_model_len=8192).memory_fraction
            == 0.9
        )


def test_a_deployment_that_needs_a_raised_fraction_runs_with_one():
    # DeepSeek-V3 FP8 on 4 GB200s, attention DP 4, experts split 4 ways: 170 GiB of weights per
    # GPU. SGLang's default (0.811) cannot hold them; such workers ran, with the fraction raised.
    model = get_model("deepseek-ai/DeepSeek-V3")
    assert weights_bytes_per_gpu(model, DEP4_EXPERTS_TP4) / GIB == pytest.approx(170.1, abs=0.1)
    for backend in ("sglang", "vllm"):
        e = estimate_memory(model, GB200, DEP4_EXPERTS_TP4, backend=backend, max_model_len=2048)
        assert e.feasible and e.memory_fraction_raised and e.memory_fraction == MAX_MEMORY_FRACTION
        assert e.kv_tokens_per_rank >= 2048
    as_given = estimate_memory(
        model, GB200, DEP4_EXPERTS_TP4, backend="sglang", gpu_memory_utilization=0.811, max_model_len=2048
    )
    assert not as_given.feasible and "weights need" in as_given.reason  # a given fraction is kept


def test_infeasible_only_when_even_the_highest_fraction_cannot_hold_the_model():
    e = estimate_memory(
        get_model("deepseek-ai/DeepSeek-V3"), get_system("h100_sxm"), ParallelShape(tp=8, moe_ep=8)
    )
    assert not e.feasible and not e.memory_fraction_raised
    assert f"a memory fraction of {MAX_MEMORY_FRACTION} leaves 76.0 GiB of h100_sxm's 80.0 GiB" in e.reason
    assert e.reason.endswith(f"; {MAX_MEMORY_FRACTION} is the highest fraction deployments set")
