"""DSA sparse attention and hybrid linear attention in the analytic model and the memory model."""

import dataclasses
import json

import numpy as np
import pytest

from aisimulate.catalog import get_model, get_system, list_models
from aisimulate.perf import AnalyticPerfModel, BatchArrays, BatchShape, ParallelShape, estimate_memory
from aisimulate.perf.cli import main
from aisimulate.perf.kernels import (
    DSA_INDEXER_DECODE_MS,
    DSA_PAST_TOPK_DECODE_MS,
    SparseContextAttention,
    SparseGenerationAttention,
)
from aisimulate.perf.memory import SGLANG_STATE_SLOTS_PER_REQUEST, SGLANG_STATE_TO_KV_RATIO

B200 = get_system("b200_sxm")
TP8 = ParallelShape(tp=8)
GLM5 = get_model("zai-org/GLM-5-FP8")
QWEN35 = get_model("Qwen/Qwen3.5-397B-A17B")
DENSE_GLM5 = dataclasses.replace(GLM5, index_n_heads=0, index_head_dim=0, index_topk=0)


def glm5_perf(model=GLM5):
    return AnalyticPerfModel(model, B200, TP8, backend="sglang")


def test_glm5_prices_attention_with_the_sparse_kernels():
    perf = glm5_perf()
    assert isinstance(perf._context, SparseContextAttention)
    assert isinstance(perf._generation, SparseGenerationAttention)
    assert perf._generation.top_k == GLM5.index_topk == 2048


def test_decode_attention_per_query_is_bounded_by_top_k_while_the_indexer_grows():
    gen = glm5_perf()._generation
    no_indexer = dataclasses.replace(
        gen, per_context_token_indexer_mem_ms=0.0, per_context_token_indexer_compute_ms=0.0
    )
    k = GLM5.index_topk
    contexts = np.array([2 * k, 4 * k, 8 * k, 64 * k], dtype=np.float64)
    # Without the indexer, one sequence's attention is flat once its context passes top-k ...
    flat = no_indexer.time_ms(1.0, contexts, 1.0)
    assert np.allclose(flat, flat[0])
    assert no_indexer.time_ms(1.0, k / 2, 1.0) < flat[0]
    # ... while the indexer's share keeps growing linearly with the context.
    full = gen.time_ms(1.0, contexts, 1.0)
    growth = np.diff(full) / np.diff(contexts)
    assert np.all(growth > 0)
    assert growth == pytest.approx(np.full(3, gen.per_context_token_indexer_mem_ms))


def test_prefill_work_per_query_is_bounded_by_top_k_while_the_indexer_grows():
    ctx = glm5_perf()._context
    no_indexer = dataclasses.replace(
        ctx, per_indexer_pair_ms=0.0, per_topk_pair_ms=0.0, per_indexer_context_token_ms=0.0
    )
    k = GLM5.index_topk

    def one_query(cost, context):
        return cost.time_ms(context + 1.0, 1.0, float(context), 1.0)

    far = [one_query(no_indexer, c) for c in (2 * k, 8 * k, 64 * k)]
    assert far == pytest.approx([far[0]] * 3)
    with_indexer = [one_query(ctx, c) for c in (2 * k, 8 * k, 64 * k)]
    assert with_indexer[0] < with_indexer[1] < with_indexer[2]


def test_long_decode_costs_less_with_dsa_than_dense_mla():
    sparse, dense = glm5_perf(), glm5_perf(DENSE_GLM5)
    short = BatchShape(decode_requests=64, decode_context_tokens=64 * 1024)
    long = BatchShape(decode_requests=64, decode_context_tokens=64 * 65536)
    # Below top-k the selected set is the whole context: the indexer is pure extra work.
    assert sparse.pass_time_ms(short) > dense.pass_time_ms(short)
    assert sparse.pass_time_ms(long) < dense.pass_time_ms(long)


def test_sparse_scalar_vector_and_stretch_paths_agree():
    perf = glm5_perf()
    contexts = np.array([1000.0, 40_000.0, 300_000.0, 3_000_000.0])
    d = np.full(4, 32.0)
    vector = perf.pass_times_ms(BatchArrays(decode_requests=d, decode_context_tokens=contexts))
    scalar = [perf.time_ms(0, 0, 0.0, 0, 32, c) for c in contexts]
    stretch = perf.decode_times_ms(32, 1.0, 0.0, contexts)
    pricer = perf.decode_pricer(32, 1.0, 0.0)
    assert vector == pytest.approx(scalar, rel=1e-12)
    assert stretch == pytest.approx(scalar, rel=1e-12)
    assert [pricer(c) for c in contexts] == pytest.approx(scalar, rel=1e-12)
    batch = BatchShape.from_chunks([(4096, 8192), (4096, 8192)], [5000, 5000])
    p = BatchArrays(
        decode_requests=np.array([2.0]),
        decode_context_tokens=np.array([10000.0]),
        prefill_tokens=np.array([8192.0]),
        prefill_requests=np.array([2.0]),
        prefill_context_tokens=np.array([16384.0]),
    )
    assert perf.pass_times_ms(p)[0] == pytest.approx(perf.pass_time_ms(batch), rel=1e-9)


def test_dsa_decode_steps_up_once_the_context_passes_top_k_by_backend():
    k = GLM5.index_topk
    trtllm = AnalyticPerfModel(GLM5, B200, TP8, backend="trtllm")._generation
    sglang = glm5_perf()._generation
    step = GLM5.num_full_attention_layers * DSA_PAST_TOPK_DECODE_MS["trtllm"]
    assert trtllm.past_topk_ms == pytest.approx(step)
    # SGLang's measured step (0.007 ms a layer) is a fifth of TensorRT-LLM's.
    assert sglang.past_topk_ms == pytest.approx(GLM5.num_full_attention_layers * 0.007)
    assert 0.0 < sglang.past_topk_ms < trtllm.past_topk_ms / 4
    for gen in (trtllm, sglang):
        below, above = gen.time_ms(4.0, 4.0 * k, 1.0), gen.time_ms(4.0, 4.0 * (k + 1), 1.0)
        jump = above - below
        assert jump == pytest.approx(gen.past_topk_ms, abs=1e-3)
        # The scalar path (one pass at a time) prices the same step.
        assert gen.scalar()(4.0, 4.0 * (k + 1), 1.0) == pytest.approx(above, rel=1e-12)
    # Per pass, not per sequence: 64 sequences past top-k pay one step.
    many = trtllm.time_ms(64.0, 64.0 * (k + 1), 1.0) - trtllm.time_ms(64.0, 64.0 * k, 1.0)
    assert many == pytest.approx(step, abs=1e-2)


def test_sglang_dsa_decode_pays_its_indexer_kernels_per_layer_whatever_the_context():
    layers = GLM5.num_full_attention_layers
    sglang = glm5_perf()._generation
    vllm = AnalyticPerfModel(GLM5, B200, TP8, backend="vllm")._generation
    assert DSA_INDEXER_DECODE_MS["sglang"] == pytest.approx(0.0265)
    assert sglang.indexer_fixed_ms == pytest.approx(layers * 0.0265) and vllm.indexer_fixed_ms == 0.0
    without = dataclasses.replace(sglang, indexer_fixed_ms=0.0)
    for sequences, context in ((1.0, 16.0), (4.0, 4.0 * 1024), (64.0, 64.0 * 8192)):
        added = sglang.time_ms(sequences, context, 1.0) - without.time_ms(sequences, context, 1.0)
        assert added == pytest.approx(sglang.indexer_fixed_ms)
        assert sglang.scalar()(sequences, context, 1.0) == pytest.approx(
            sglang.time_ms(sequences, context, 1.0)
        )
    # A pass without decode sequences pays nothing.
    assert sglang.time_ms(0.0, 0.0, 1.0) == 0.0 and sglang.scalar()(0.0, 0.0, 1.0) == 0.0
    # Dense MLA models (DeepSeek-V3) do not get it.
    dense = AnalyticPerfModel(DENSE_GLM5, B200, TP8, backend="sglang")._generation
    assert not isinstance(dense, SparseGenerationAttention)


def test_indexer_keys_are_part_of_the_kv_bytes_and_shrink_kv_capacity():
    sparse = estimate_memory(GLM5, B200, TP8, backend="sglang")
    dense = estimate_memory(DENSE_GLM5, B200, TP8, backend="sglang")
    per_layer_indexer = GLM5.index_head_dim + GLM5.index_head_dim // 128 * 4  # fp8 keys + fp32 scales
    layers = GLM5.num_full_attention_layers
    assert sparse.kv_bytes_per_token_per_gpu == dense.kv_bytes_per_token_per_gpu + layers * per_layer_indexer
    assert sparse.kv_tokens_per_rank == int(
        sparse.kv_budget_bytes_per_gpu // sparse.kv_bytes_per_token_per_gpu
    )
    assert sparse.kv_tokens_per_rank < dense.kv_tokens_per_rank


def test_hybrid_kv_covers_full_attention_layers_only():
    mem = estimate_memory(QWEN35, B200, TP8, backend="vllm")
    full = QWEN35.num_full_attention_layers
    assert full == QWEN35.num_layers - QWEN35.num_linear_attention_layers
    kv_heads = max(QWEN35.num_kv_heads // 8, 1)
    assert mem.kv_bytes_per_token_per_gpu == full * 2 * kv_heads * QWEN35.head_dim * 2
    assert mem.state_bytes_per_request_per_gpu == pytest.approx(QWEN35.linear_state_bytes_per_request() / 8)


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_sglang_state_pool_bounds_running_requests(prefix_caching):
    mem = estimate_memory(
        QWEN35,
        B200,
        TP8,
        backend="sglang",
        gpu_memory_utilization=0.9,
        max_num_seqs=4096,
        enable_prefix_caching=prefix_caching,
    )
    state = mem.state_bytes_per_request_per_gpu
    # mem_fraction_static's share after the weights, split ratio : 1 between states and KV.
    nccl = mem.runtime_overhead_bytes_per_gpu - B200.runtime_overhead_gib * 2**30
    whole = (mem.capacity_bytes - nccl) * 0.9 - mem.weights_bytes_per_gpu
    slots = int(whole * SGLANG_STATE_TO_KV_RATIO / (1 + SGLANG_STATE_TO_KV_RATIO) // state)
    assert mem.max_running_requests == slots // SGLANG_STATE_SLOTS_PER_REQUEST[prefix_caching]
    assert 0 < mem.max_running_requests < 4096
    assert mem.kv_budget_bytes_per_gpu == pytest.approx(whole - slots * state)
    assert mem.kv_tokens_per_rank == int(mem.kv_budget_bytes_per_gpu // mem.kv_bytes_per_token_per_gpu)


def test_pinned_state_slots_and_vllm_reserve_for_max_num_seqs():
    pinned = estimate_memory(QWEN35, B200, TP8, backend="sglang", state_slots=30, enable_prefix_caching=True)
    assert pinned.max_running_requests == 10
    vllm = estimate_memory(QWEN35, B200, TP8, backend="vllm", max_num_seqs=128)
    more = estimate_memory(QWEN35, B200, TP8, backend="vllm", max_num_seqs=256)
    assert vllm.max_running_requests == 128
    freed = vllm.kv_budget_bytes_per_gpu - more.kv_budget_bytes_per_gpu
    # 128 more states, less the activations and logits of 128 more sequences.
    extra_logits = more.activation_bytes_per_gpu - vllm.activation_bytes_per_gpu
    assert freed == pytest.approx(128 * vllm.state_bytes_per_request_per_gpu + extra_logits)
    assert estimate_memory(get_model("zai-org/GLM-5-FP8"), B200, TP8).max_running_requests == 0


def test_linear_layers_prefill_linear_in_length_and_decode_constant_per_token():
    perf = AnalyticPerfModel(QWEN35, B200, TP8, backend="sglang")
    gdn = perf._linear_attention
    fixed = gdn.fixed_ms
    assert gdn.time_ms(8192, 0) - fixed == pytest.approx(2 * (gdn.time_ms(4096, 0) - fixed))

    # A decode pass's attention grows with the context only through the 15 full-attention layers.
    def attention(ctx):
        return perf.explain(BatchShape(decode_requests=16, decode_context_tokens=16 * ctx)).attention_ms

    gen = perf._generation
    for lo, hi in ((1024, 8192), (8192, 65536)):
        growth = attention(hi) - attention(lo)
        assert growth == pytest.approx(gen.time_ms(16, 16 * hi, 1.0) - gen.time_ms(16, 16 * lo, 1.0))
    assert attention(1024) > gen.time_ms(16, 16 * 1024, 1.0)  # the state updates are there


FRONTIER = [
    name
    for name in list_models()
    if any(k in name for k in ("GLM-5", "Kimi-K2.5", "MiniMax-M2.5", "Qwen3.5", "DeepSeek-V3.2"))
]


@pytest.mark.parametrize("name", FRONTIER)
def test_perf_latency_and_memory_work_for_every_frontier_model(name, capsys):
    common = ["--model", name, "--system", "b200_sxm", "--tp", "8", "--backend", "sglang", "--json"]
    assert main(["latency", *common, "--prefill-tokens", "4096", "--decode-batch", "32"]) == 0
    latency = json.loads(capsys.readouterr().out)
    assert latency["total_ms"] > 0 and latency["breakdown"]["attention_ms"] > 0
    assert main(["memory", *common]) == 0
    memory = json.loads(capsys.readouterr().out)
    model = get_model(name)
    assert memory["kv_bytes_per_token_per_gpu"] > 0
    assert (memory["state_bytes_per_request_per_gpu"] > 0) == model.is_hybrid_linear


def test_frontier_list_covers_both_new_attention_kinds():
    kinds = {(get_model(n).is_sparse_attention, get_model(n).is_hybrid_linear) for n in FRONTIER}
    assert {(True, False), (False, True), (False, False)} <= kinds


@pytest.mark.parametrize(
    ("new", "context", "requests"),
    [(1, 0, 1), (512, 0, 1), (4096, 0, 2), (1000, 1500, 1), (8192, 16384, 3), (1, 100_000, 4)],
)
def test_sparse_scalar_closures_are_the_array_formulas(new, context, requests):
    perf = glm5_perf()
    pairs = requests * new * (context + (new + 1) / 2)
    args = (pairs, float(requests), float(requests * context), float(requests * new))
    assert perf._context.scalar()(*args) == pytest.approx(float(perf._context.time_ms(*args)), rel=1e-12)
    decode = (float(requests), float(requests * (context + new)), 2.0)
    assert perf._generation.scalar()(*decode) == pytest.approx(
        float(perf._generation.time_ms(*decode)), rel=1e-12
    )
