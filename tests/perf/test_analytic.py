import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import ConfigError
from aisimulate.perf import AnalyticPerfModel, BatchArrays, BatchShape, ParallelShape
from aisimulate.perf.calibration import calibration_for

H200 = get_system("h200_sxm")
LLAMA8 = AnalyticPerfModel(get_model("meta-llama/Llama-3.1-8B"), H200, ParallelShape())
QWEN_MOE = AnalyticPerfModel(get_model("Qwen/Qwen3-30B-A3B"), H200, ParallelShape(tp=2))
DSV3 = AnalyticPerfModel(
    get_model("deepseek-ai/DeepSeek-V3"),
    H200,
    ParallelShape(tp=8, moe_ep=8),
    backend="trtllm",
    kv_cache_dtype="fp8",
)
MODELS = [LLAMA8, QWEN_MOE, DSV3]


def decode(n, context):
    return BatchShape(decode_requests=n, decode_context_tokens=n * context)


def prefill(tokens, context=0):
    return BatchShape.from_chunks([(tokens, context)])


@settings(max_examples=60, deadline=None)
@given(
    which=st.sampled_from(range(len(MODELS))),
    tokens=st.integers(1, 16384),
    extra=st.integers(1, 4096),
    context=st.integers(0, 32768),
)
def test_prefill_latency_grows_with_tokens_and_context(which, tokens, extra, context):
    model = MODELS[which]
    base = model.pass_time_ms(prefill(tokens, context))
    assert model.pass_time_ms(prefill(tokens + extra, context)) > base
    assert model.pass_time_ms(prefill(tokens, context + extra)) > base


@settings(max_examples=60, deadline=None)
@given(
    which=st.sampled_from(range(len(MODELS))),
    batch=st.integers(1, 512),
    extra=st.integers(1, 256),
    context=st.integers(1, 32768),
)
def test_decode_latency_grows_with_batch_and_context(which, batch, extra, context):
    model = MODELS[which]
    base = model.pass_time_ms(decode(batch, context))
    assert model.pass_time_ms(decode(batch + extra, context)) > base
    assert model.pass_time_ms(decode(batch, context + extra)) > base


def test_small_batch_decode_is_bound_by_reading_the_weights():
    weights_read_ms = get_model("meta-llama/Llama-3.1-8B").weight_bytes / (H200.hbm_gbps * 1e6)
    t = LLAMA8.pass_time_ms(decode(1, 128))
    assert weights_read_ms < t < 2.0 * weights_read_ms
    # Batching is nearly free while memory-bound.
    assert LLAMA8.pass_time_ms(decode(16, 128)) < 1.2 * t


def test_large_prefill_is_compute_bound():
    flops = 2 * get_model("meta-llama/Llama-3.1-8B").total_params * 8192
    ideal_ms = flops / (H200.tflops["bf16"] * 1e9)
    t = LLAMA8.explain(prefill(8192)).gemm_ms
    assert ideal_ms < t < 1.6 * ideal_ms


def test_breakdown_components_appear_where_they_belong():
    dense = LLAMA8.explain(prefill(1024))
    assert dense.moe_ms == 0 and dense.comm_ms == 0 and dense.gemm_ms > 0 and dense.attention_ms > 0
    tp = AnalyticPerfModel(get_model("meta-llama/Llama-3.1-70B"), H200, ParallelShape(tp=4)).explain(
        prefill(1024)
    )
    assert tp.comm_ms > 0
    moe = DSV3.explain(decode(64, 1024))
    assert moe.moe_ms > 0 and moe.comm_ms > 0


def test_tp_makes_a_pass_faster_per_gpu():
    model = get_model("meta-llama/Llama-3.1-70B")
    tp2 = AnalyticPerfModel(model, H200, ParallelShape(tp=2))
    tp8 = AnalyticPerfModel(model, H200, ParallelShape(tp=8))
    assert tp8.pass_time_ms(decode(32, 1024)) < tp2.pass_time_ms(decode(32, 1024))


def test_fp8_weights_speed_up_memory_bound_decode():
    # The kernels, not the per-pass framework overhead (the same for both checkpoints).
    def kernels_ms(model):
        parts = model.explain(decode(8, 512))
        return model.pass_time_ms(decode(8, 512)) - parts.overhead_ms

    fp8 = AnalyticPerfModel(get_model("nvidia/Llama-3.1-8B-Instruct-FP8"), H200, ParallelShape())
    assert kernels_ms(fp8) < 0.75 * kernels_ms(LLAMA8)


def test_fp8_kv_cache_halves_decode_attention():
    model = get_model("meta-llama/Llama-3.1-8B")
    bf16 = AnalyticPerfModel(model, H200, ParallelShape()).explain(decode(128, 8192)).attention_ms
    fp8 = (
        AnalyticPerfModel(model, H200, ParallelShape(), kv_cache_dtype="fp8")
        .explain(decode(128, 8192))
        .attention_ms
    )
    assert fp8 == pytest.approx(bf16 / 2, rel=0.15)


def test_mtp_verification_costs_more_than_one_token_but_less_than_two_steps():
    mtp = AnalyticPerfModel(
        get_model("deepseek-ai/DeepSeek-V3"), H200, ParallelShape(tp=8, moe_ep=8), nextn=1
    )
    one = DSV3.pass_time_ms(decode(32, 2048))
    two_tokens = mtp.pass_time_ms(
        BatchShape(decode_requests=32, decode_context_tokens=32 * 2048, tokens_per_step=2)
    )
    assert one < two_tokens < 2 * one


@pytest.mark.parametrize("name", ["deepseek-ai/DeepSeek-V3", "MiniMaxAI/MiniMax-M2"])
def test_an_mtp_draft_step_is_one_more_layer_over_the_verified_tokens(name):
    """TensorRT-LLM's MTP worker runs the MTP layer first over every token the pass verified,
    then over one token a request per further draft; each step is one decoder layer (one MTP
    module, however many the checkpoint ships) with its collectives."""
    model, shape = get_model(name), ParallelShape(tp=8, moe_ep=8)
    plain = AnalyticPerfModel(model, H200, shape, backend="trtllm")
    layers = model.num_layers

    def parts(perf, tokens_per_step):
        return perf.explain(
            BatchShape(decode_requests=16, decode_context_tokens=16 * 2048, tokens_per_step=tokens_per_step)
        )

    one = parts(AnalyticPerfModel(model, H200, shape, backend="trtllm", nextn=1), 2)
    verified = parts(plain, 2)
    for field in ("moe_ms", "comm_ms", "attention_ms"):
        assert getattr(one, field) == pytest.approx(getattr(verified, field) * (1 + 1 / layers), rel=1e-9)
    three = parts(AnalyticPerfModel(model, H200, shape, backend="trtllm", nextn=3), 4)
    verified, single = parts(plain, 4), parts(plain, 1)
    for field in ("moe_ms", "comm_ms"):
        drafts = (getattr(verified, field) + 2 * getattr(single, field)) / layers
        assert getattr(three, field) == pytest.approx(getattr(verified, field) + drafts, rel=1e-9)


def test_sliding_window_layers_stop_growing_with_context():
    oss = AnalyticPerfModel(get_model("openai/gpt-oss-120b"), H200, ParallelShape())
    short = oss.explain(decode(64, 4096)).attention_ms
    long = oss.explain(decode(64, 8192)).attention_ms
    # Only the full-attention half of the layers reads the longer context.
    assert long < 2 * short


def test_unmeasured_system_borrows_a_measured_generation():
    a100 = AnalyticPerfModel(get_model("meta-llama/Llama-3.1-8B"), get_system("a100_sxm"), ParallelShape())
    assert "stand-in for a100_sxm" in a100.calibration.source
    gb200 = AnalyticPerfModel(get_model("meta-llama/Llama-3.1-8B"), get_system("gb200"), ParallelShape())
    assert gb200.calibration.source.startswith("b200_sxm/")
    assert a100.pass_time_ms(decode(8, 512)) > LLAMA8.pass_time_ms(decode(8, 512))


def test_batch_shape_rejects_nonsense():
    with pytest.raises(ConfigError):
        BatchShape(decode_requests=-1)
    with pytest.raises(ConfigError):
        BatchShape(prefill_tokens=10)
    with pytest.raises(ConfigError):
        BatchShape(decode_requests=1, tokens_per_step=0.5)


def test_from_chunks_counts_causal_pairs_exactly():
    b = BatchShape.from_chunks([(4, 0), (2, 10)], [5, 7])
    assert b.prefill_tokens == 6 and b.prefill_requests == 2 and b.prefill_context_tokens == 10
    assert b.attention_pairs == 4 * (0 + 2.5) + 2 * (10 + 1.5)
    assert b.decode_requests == 2 and b.decode_context_tokens == 12


def test_backend_name_is_checked():
    with pytest.raises(ConfigError, match="backend"):
        AnalyticPerfModel(get_model("meta-llama/Llama-3.1-8B"), H200, ParallelShape(), backend="tgi")


@pytest.mark.parametrize(
    "batch",
    [decode(1, 512), decode(64, 2048), prefill(8192), BatchShape.from_chunks([(512, 0)], [1024] * 32)],
)
def test_async_scheduling_hides_the_overhead_behind_the_kernels(batch):
    """vLLM's async scheduling prepares the next pass during this one: a pass costs the longer of
    the kernels and the framework overhead, never their sum."""
    model, system, shape = get_model("meta-llama/Llama-3.1-8B"), H200, ParallelShape()
    sync = AnalyticPerfModel(model, system, shape)
    overlap = AnalyticPerfModel(model, system, shape, async_scheduling=True)
    parts = sync.explain(batch)
    kernels = parts.gemm_ms + parts.attention_ms + parts.moe_ms + parts.comm_ms
    assert sync.pass_time_ms(batch) == pytest.approx(kernels + parts.overhead_ms)
    assert overlap.pass_time_ms(batch) == pytest.approx(max(kernels, parts.overhead_ms))
    shown = overlap.explain(batch)
    assert shown.overhead_ms == pytest.approx(max(0.0, parts.overhead_ms - kernels))
    assert shown.total_ms == pytest.approx(overlap.pass_time_ms(batch))


def test_async_scheduling_prices_decode_stretches_like_single_passes():
    overlap = AnalyticPerfModel(
        get_model("meta-llama/Llama-3.1-8B"), H200, ParallelShape(), async_scheduling=True
    )
    requests = np.array([1, 8, 64, 256])
    contexts = requests * np.array([300, 5000, 1234, 20_000])
    arrays = BatchArrays(decode_requests=requests, decode_context_tokens=contexts)
    expected = [overlap.pass_time_ms(decode(d, c // d)) for d, c in zip(requests, contexts, strict=True)]
    np.testing.assert_allclose(overlap.pass_times_ms(arrays), expected, rtol=1e-12)
    sync = AnalyticPerfModel(get_model("meta-llama/Llama-3.1-8B"), H200, ParallelShape())
    assert np.all(overlap.pass_times_ms(arrays) < sync.pass_times_ms(arrays))


# Absorbed MLA on B200 with an FP8 cache: its decode attention is compute-bound.
DSV3_B200 = AnalyticPerfModel(
    get_model("deepseek-ai/DeepSeek-V3"),
    get_system("b200_sxm"),
    ParallelShape(tp=1, attention_dp=8, moe_tp=8),
    backend="sglang",
    kv_cache_dtype="fp8",
)


@pytest.mark.parametrize("model", [*MODELS, DSV3_B200], ids=["llama8", "qwen_moe", "dsv3", "dsv3_b200"])
@pytest.mark.parametrize("decoders", [1, 64, 250])
def test_a_decode_pass_is_a_straight_line_in_its_context(model, decoders):
    """Planned decode passes are priced as intercept + slope x context (memory- or
    compute-bound): the scalar price to rounding at every context."""
    generation = model._generation
    bound = max(generation.per_context_token_mem_ms, generation.per_context_token_compute_ms)
    base, slope = model.decode_line(decoders, 1.0, 500_000)
    assert slope == bound
    for ctx in (decoders * 100, decoders * 2048 + 7, 450_000):
        exact = model.time_ms(0, 0, 0.0, 0, decoders, ctx, 1.0, ctx, 500_000)
        assert base + slope * ctx == pytest.approx(exact, rel=1e-12)


def test_a_compute_bound_decode_line_follows_the_compute_term():
    generation = DSV3_B200._generation
    compute = generation.per_context_token_compute_ms
    assert compute > generation.per_context_token_mem_ms
    assert DSV3_B200.decode_line(64, 1.0, 0)[1] == compute


def test_no_decode_line_where_the_price_bends():
    model, shape = get_model("meta-llama/Llama-3.1-8B"), ParallelShape()
    # An overlapped overhead (async scheduling) is a max(), the draft layers' attention (MTP)
    # another term in the context: those are priced pass by pass.
    assert AnalyticPerfModel(model, H200, shape, async_scheduling=True).decode_line(64, 1.0, 0) is None
    dsv3 = get_model("deepseek-ai/DeepSeek-V3")
    mtp = AnalyticPerfModel(dsv3, H200, ParallelShape(tp=8, moe_ep=8), nextn=1)
    assert mtp.decode_line(64, 2.0, 0) is None
    # Sparse attention reads a capped number of context tokens.
    glm5 = AnalyticPerfModel(get_model("zai-org/GLM-5-FP8"), H200, ParallelShape(tp=8, moe_ep=8))
    assert glm5.decode_line(64, 1.0, 0) is None


@pytest.mark.parametrize("kernel_tables", [False, True])
def test_every_moe_layer_pays_for_its_router_gemm(kernel_tables):
    """The router (hidden x experts, bf16, unsplit) runs on every GPU before the experts, so with
    everything else equal more experts cost more GEMM time, and a dense pass has none of it."""
    import dataclasses

    base = get_model("Qwen/Qwen3-30B-A3B")
    wider = dataclasses.replace(base, num_experts=4 * base.num_experts)
    batch = BatchShape(prefill_tokens=4096, prefill_requests=1)

    def gemm_ms(model):
        pm = AnalyticPerfModel(
            model, get_system("h200_sxm"), ParallelShape(tp=2), backend="vllm", kernel_tables=kernel_tables
        )
        return pm.explain(batch).gemm_ms

    assert gemm_ms(wider) > gemm_ms(base) * 1.01


@pytest.mark.parametrize("kernel_tables", [False, True])
def test_a_qk_norm_over_all_heads_adds_one_all_reduce_a_layer_under_tp(kernel_tables):
    """MiniMax-M2 normalises q and k over all heads: under TP each layer all-reduces the variances
    (a latency-bound collective: about the same cost at 1 and 64 tokens); at tp 1 nothing."""
    import dataclasses

    minimax = get_model("MiniMaxAI/MiniMax-M2.5")
    assert minimax.qk_norm_across_heads
    assert not get_model("Qwen/Qwen3-30B-A3B").qk_norm_across_heads
    plain = dataclasses.replace(minimax, qk_norm_across_heads=False)

    def comm_ms(model, tp, tokens):
        pm = AnalyticPerfModel(
            model, get_system("h100_sxm"), ParallelShape(tp=tp), backend="vllm", kernel_tables=kernel_tables
        )
        return pm.explain(BatchShape(decode_requests=tokens, decode_context_tokens=tokens * 1024)).comm_ms

    extra = [comm_ms(minimax, 4, n) - comm_ms(plain, 4, n) for n in (1, 64)]
    assert all(e > 0.1 for e in extra)  # 62 layers x a few microseconds
    assert extra[1] < 1.5 * extra[0]
    assert comm_ms(minimax, 1, 8) == comm_ms(plain, 1, 8) == 0.0


def test_a_worker_spanning_two_nodes_pays_the_network_latency_on_every_collective():
    """DeepSeek TEP16 on H100 (two 8-GPU nodes): each of the 2 x 61 all-reduces of a decode pass
    crosses the network twice (NCCL's inter-node reduce and broadcast), 10 us each
    (``p2p_latency_us``); inside one node (TEP8) no crossing."""

    model = get_model("deepseek-ai/DeepSeek-R1")
    h100 = get_system("h100_sxm")
    slow = h100.model_copy(update={"p2p_latency_us": h100.p2p_latency_us + 100})

    def comm_ms(system, tp):
        pm = AnalyticPerfModel(model, system, ParallelShape(tp=tp, moe_ep=tp), backend="trtllm")
        return pm.explain(decode(1, 1500)).comm_ms

    assert comm_ms(slow, 16) - comm_ms(h100, 16) == pytest.approx(2 * 61 * 2 * 0.1)
    assert comm_ms(slow, 8) == comm_ms(h100, 8)
    # The crossings make the two-node worker's collectives dearer than one node's.
    assert comm_ms(h100, 16) > comm_ms(h100, 8) + 2 * 61 * 2 * 0.010
    # Across nodes each all-reduce runs NCCL, at its measured in-node latency (``nccl_latency_us``)
    # instead of the custom kernel's fit; inside one node the custom kernel stays.
    slower_nccl = h100.model_copy(update={"nccl_latency_us": h100.nccl_latency_us + 100})
    assert comm_ms(slower_nccl, 16) - comm_ms(h100, 16) == pytest.approx(2 * 61 * 0.1)
    assert comm_ms(slower_nccl, 8) == comm_ms(h100, 8)


def test_trtllm_gathers_the_experts_tokens_where_it_has_no_all_to_all():
    """TensorRT-LLM's MoE runs an all-to-all only over more expert ranks than a token's 8 experts
    inside one NVLink domain (multi-node NVLink); DEP16 over two H100 nodes, and DEP8 anywhere,
    all-gather the group's tokens and reduce-scatter them (a ring all-reduce's bytes: twice an
    all-to-all's at top-8 of 16 ranks); GB200's NVL72 keeps DEP16's all-to-all."""

    model = get_model("deepseek-ai/DeepSeek-R1")

    def moe_comm(system, ranks, fallback=True):
        shape = ParallelShape(tp=1, attention_dp=ranks, moe_ep=ranks)
        pm = AnalyticPerfModel(model, get_system(system), shape, backend="trtllm")
        pm._alltoall_needs_nvlink = fallback
        return pm._build_comm(pm.calibration)[1]

    gathered, dispatched = moe_comm("h100_sxm", 16), moe_comm("h100_sxm", 16, fallback=False)
    cal = calibration_for(get_system("h100_sxm"), "trtllm")
    assert gathered.per_token_ms / dispatched.per_token_ms == pytest.approx(
        2 * cal.alltoall.bw_eff / cal.allreduce.bw_eff
    )
    assert moe_comm("h100_sxm", 8) != moe_comm("h100_sxm", 8, fallback=False)
    assert moe_comm("gb200", 16) == moe_comm("gb200", 16, fallback=False)
    # DEP4: a gather moves (n-1)/n of the tokens each way, the all-to-all was priced top_k / n.
    four, four_a2a = moe_comm("gb200", 4), moe_comm("gb200", 4, fallback=False)
    assert four.per_token_ms < 0.6 * four_a2a.per_token_ms
    decode_pass = AnalyticPerfModel(
        model, get_system("h100_sxm"), ParallelShape(tp=1, attention_dp=16, moe_ep=16), backend="trtllm"
    ).explain(decode(16, 1500))
    assert decode_pass.comm_ms > 16.0  # DEP16 at 16 a rank: 58 x 2 gathers of 256 tokens over the network
    # The backends that dispatch (SGLang's DeepEP, vLLM) keep the all-to-all.
    sglang = AnalyticPerfModel(
        model, get_system("h100_sxm"), ParallelShape(tp=1, attention_dp=16, moe_ep=16), backend="sglang"
    )
    assert not sglang._alltoall_needs_nvlink


def test_trtllm_runs_the_norm_its_all_reduce_fuses_after_nccl_across_nodes():
    """TensorRT-LLM's own all-reduce kernel does the residual add and RMSNorm; across nodes it
    falls back to NCCL and runs them as a kernel of their own (``fallbackRunSubsequentOps``):
    TEP16 over two H100 nodes pays one memory-bound launch a TP all-reduce (2 a layer), TP8 inside
    a node and the backends whose all-reduce fuses nothing do not."""
    model = get_model("deepseek-ai/DeepSeek-R1")
    h100 = get_system("h100_sxm")

    def tp_comm(backend, tp, fuses=None):
        pm = AnalyticPerfModel(model, h100, ParallelShape(tp=tp, moe_ep=tp), backend=backend)
        if fuses is not None:
            pm._allreduce_fuses_norm = fuses
        return pm._build_comm(pm.calibration)[0]

    fused, plain = tp_comm("trtllm", 16), tp_comm("trtllm", 16, fuses=False)
    launches = 2 * model.num_layers
    assert fused.fixed_ms - plain.fixed_ms == pytest.approx(launches * h100.mem_latency_us / 1000)
    norm_bytes = 4 * model.hidden_size * 2.0
    assert fused.per_token_ms - plain.per_token_ms == pytest.approx(
        launches * norm_bytes / (h100.hbm_gbps * h100.hbm_efficiency * 1e6)
    )
    assert tp_comm("trtllm", 8) == tp_comm("trtllm", 8, fuses=False)
    assert tp_comm("sglang", 16) == tp_comm("sglang", 16, fuses=False)
    # The whole pass: a TEP16 decode step at one request pays it too.
    pm = AnalyticPerfModel(model, h100, ParallelShape(tp=16, moe_ep=16), backend="trtllm")
    before = pm.explain(decode(1, 1500)).comm_ms
    pm._allreduce_fuses_norm = False
    pm._comm = pm._build_comm(pm.calibration)[0]
    pm._bind_scalar()
    assert before - pm.explain(decode(1, 1500)).comm_ms == pytest.approx(
        launches * (h100.mem_latency_us / 1000 + norm_bytes / (h100.hbm_gbps * h100.hbm_efficiency * 1e6))
    )
