"""The scalar closures and the array formulas of each kernel family must agree."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate.perf.kernels import (
    AttentionFit,
    Collective,
    CollectiveFit,
    GemmFit,
    MeasuredCurve,
    MoeFit,
    Network,
    all_reduce,
    all_to_all,
    context_attention,
    gemm_roofline,
    generation_attention,
    moe_block,
    unfused_norm,
)

GEMM = gemm_roofline(
    weight_params=4096 * 14336,
    act_elems_per_token=4096 + 14336,
    weight_bytes_per_param=2,
    peak_tflops=989,
    hbm_gbps=4800,
    fit=GemmFit(),
    num_kernels=2,
)
CTX = context_attention(
    num_layers=12,
    num_heads=8,
    qk_dim=64,
    v_dim=64,
    kv_bytes_per_token_layer=2048,
    peak_tflops=989,
    hbm_gbps=4800,
    fit=AttentionFit(),
    num_sliding_layers=12,
    sliding_window=128,
)
GEN = generation_attention(
    num_layers=12,
    num_heads=8,
    kv_bytes_per_token_layer=2048,
    flops_per_context_token_layer=2048,
    peak_tflops=989,
    hbm_gbps=4800,
    fit=AttentionFit(),
    num_sliding_layers=12,
    sliding_window=128,
)
MOE = moe_block(
    num_layers=48,
    hidden_size=2048,
    expert_intermediate=768,
    num_experts=128,
    top_k=8,
    moe_tp=1,
    moe_ep=2,
    weight_bytes_per_param=2,
    peak_tflops=989,
    hbm_gbps=4800,
    fit=MoeFit(),
)
AR = all_reduce(count=64, num_gpus=4, bytes_per_token=8192, link_gbps=450, fit=CollectiveFit())

counts = st.floats(min_value=0, max_value=1e5, allow_nan=False)


@pytest.mark.parametrize(
    ("sliding_layers", "flops", "tokens_per_step"),
    [(0, 2048, 1.0), (0, 2048, 4.0), (12, 2048, 1.0), (0, 2e6, 1.0), (0, 3e5, 1.0), (0, 3e5, 1.05)],
    ids=["memory-bound", "memory-bound-mtp", "sliding", "compute-bound", "just-memory", "just-compute"],
)
def test_attention_over_contexts_is_time_ms_to_the_bit(sliding_layers, flops, tokens_per_step):
    gen = generation_attention(
        num_layers=12,
        num_heads=8,
        kv_bytes_per_token_layer=2048,
        flops_per_context_token_layer=flops,
        peak_tflops=989,
        hbm_gbps=4800,
        fit=AttentionFit(),
        num_sliding_layers=sliding_layers,
        sliding_window=128,
    )
    ctx = np.array([0.0, 7.0, 64.0 * 100, 123_457.0, 2.5e6])
    assert np.array_equal(gen.over_contexts(48, ctx, tokens_per_step), gen.time_ms(48, ctx, tokens_per_step))


@settings(max_examples=200)
@given(a=counts, b=counts, c=counts, d=counts)
def test_scalar_closures_equal_array_formulas(a, b, c, d):
    assert GEMM.scalar()(a) == pytest.approx(float(GEMM.time_ms(np.float64(a))))
    assert CTX.scalar()(a * 100, b, c, d) == pytest.approx(float(CTX.time_ms(a * 100, b, c, d)))
    assert GEN.scalar()(a, b * 10, 1 + c / 1e5) == pytest.approx(float(GEN.time_ms(a, b * 10, 1 + c / 1e5)))
    assert MOE.scalar()(a) == pytest.approx(float(MOE.time_ms(np.float64(a))))
    assert AR.scalar()(a) == pytest.approx(float(AR.time_ms(np.float64(a))))


def test_moe_touches_every_expert_only_with_many_tokens():
    # One token reads top_k / moe_ep experts' weights; thousands of tokens read all 64 local experts.
    one, many = MOE.scalar()(1), MOE.scalar()(8192)
    assert many > 5 * one


def test_all_reduce_is_free_on_one_gpu():
    solo = all_reduce(count=64, num_gpus=1, bytes_per_token=8192, link_gbps=450, fit=CollectiveFit())
    assert solo.scalar()(1000) == 0.0


H100_NETWORK = Network(domain_gpus=8, gbps=50, latency_ms=0.010)
FIT = CollectiveFit(bw_eff=0.5, latency_ms=0.006, latency_per_log2_ms=0.0)


def test_collectives_inside_one_nvlink_domain_ignore_the_network():
    for collective in (all_reduce, all_to_all):
        args = dict(count=10, num_gpus=8, bytes_per_token=8192, link_gbps=450, fit=FIT)
        assert collective(**args, network=H100_NETWORK) == collective(**args)


def test_an_all_reduce_across_nodes_crosses_the_network_twice_a_level():
    # 16 GPUs of two 8-GPU nodes: every byte of the ring at the network's rate; a reduce and a
    # broadcast across the network (2 x 10 us) beside the fit's in-node latency.
    ar = all_reduce(count=1, num_gpus=16, bytes_per_token=1e6, link_gbps=450, fit=FIT, network=H100_NETWORK)
    assert ar.per_token_ms == pytest.approx(2 * 15 / 16 * 1e6 / (50e6 * 0.5))
    assert ar.fixed_ms == pytest.approx(0.006 + 2 * 0.010)
    # Four nodes: a two-level tree, four crossings; nine nodes (ceil) four levels, eight.
    four = all_reduce(count=1, num_gpus=32, bytes_per_token=1e6, link_gbps=450, fit=FIT, network=H100_NETWORK)
    assert four.fixed_ms == pytest.approx(0.006 + 4 * 0.010)
    nine = all_reduce(count=1, num_gpus=72, bytes_per_token=1e6, link_gbps=450, fit=FIT, network=H100_NETWORK)
    assert nine.fixed_ms == pytest.approx(0.006 + 8 * 0.010)
    assert ar.scalar()(3.0) == pytest.approx(float(ar.time_ms(np.float64(3.0))))


def test_an_all_reduce_across_nodes_pays_nccls_latency_not_the_custom_kernels():
    # Where NCCL's in-node latency is measured, a group spanning nodes pays it (the custom
    # all-reduce the fit prices needs one node), plus the crossings; inside a node, the fit.
    nccl = Network(domain_gpus=8, gbps=50, latency_ms=0.010, nccl_latency_ms=0.016)
    args = dict(count=1, bytes_per_token=1e6, link_gbps=450, fit=FIT)
    across = all_reduce(num_gpus=16, network=nccl, **args)
    assert across.fixed_ms == pytest.approx(0.016 + 2 * 0.010)
    assert across.per_token_ms == all_reduce(num_gpus=16, network=H100_NETWORK, **args).per_token_ms
    assert all_reduce(num_gpus=8, network=nccl, **args) == all_reduce(num_gpus=8, **args)
    # The all-to-all keeps its own fit's latency.
    plain = all_to_all(num_gpus=16, network=H100_NETWORK, **args)
    assert all_to_all(num_gpus=16, network=nccl, **args) == plain


def test_an_unfused_norm_is_one_memory_bound_launch_a_call():
    # Four activations a token (reduced output and residual in, residual and normed out) at the
    # effective HBM rate, plus one kernel latency an all-reduce it follows.
    h100 = dict(bytes_per_token=14336, hbm_gbps=3350, hbm_efficiency=0.8, latency_ms=0.003)
    norm = unfused_norm(count=122, **h100)
    assert norm.fixed_ms == pytest.approx(122 * 0.003)
    assert norm.per_token_ms == pytest.approx(122 * 4 * 14336 / (3350e6 * 0.8))
    assert unfused_norm(count=0, **h100) == Collective(0.0, 0.0)


def test_an_all_to_all_across_nodes_crosses_the_network_once():
    a2a = all_to_all(count=2, num_gpus=16, bytes_per_token=1e6, link_gbps=450, fit=FIT, network=H100_NETWORK)
    assert a2a.per_token_ms == pytest.approx(2 * 15 / 16 * 1e6 / (50e6 * 0.5))
    assert a2a.fixed_ms == pytest.approx(2 * (0.006 + 0.010))


def test_skewed_routing_loads_the_busiest_expert_parallel_gpu_more():
    def block(moe_ep: int, ep_skew: float):
        geometry = dict(num_layers=1, hidden_size=2048, expert_intermediate=768, num_experts=128, top_k=8)
        return moe_block(
            **geometry,
            moe_tp=1,
            moe_ep=moe_ep,
            weight_bytes_per_param=2,
            peak_tflops=989,
            hbm_gbps=4800,
            fit=MoeFit(ep_skew=ep_skew),
        )

    assert block(4, 0.5).pairs_per_token == pytest.approx(2 * block(4, 0.0).pairs_per_token)
    assert block(1, 0.5).pairs_per_token == block(1, 0.0).pairs_per_token  # no split, no skew
    balanced, skewed = block(8, 0.0).scalar()(16384), block(8, 0.4).scalar()(16384)
    assert skewed == pytest.approx(balanced * 8**0.4, rel=0.05)  # compute-bound: by the pair share


CURVE = MeasuredCurve((1.0, 2.0, 4.0, 8.0), (0.1, 0.12, 0.2, 0.36), 10.0)


@settings(max_examples=200)
@given(tokens=st.floats(min_value=0, max_value=64, allow_nan=False))
def test_measured_moe_curve_scalar_equals_array(tokens):
    assert CURVE.scalar()(tokens) == pytest.approx(float(CURVE.time_ms(np.float64(tokens))))


def test_measured_moe_curve_interpolates_and_extends_its_last_slope():
    at = CURVE.scalar()
    assert at(0) == 0.0
    assert at(0.5) == pytest.approx(10 * 0.1)  # below the first count: the first measurement
    assert at(4) == pytest.approx(10 * 0.2)  # a measured count: exactly its latency
    assert at(6) == pytest.approx(10 * 0.28)  # halfway between 4 and 8 tokens
    assert at(16) == pytest.approx(10 * (0.36 + 8 * 0.04))  # past the last: its slope (0.04/token)
