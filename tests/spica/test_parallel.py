"""Legal deployments: the enumeration's pinned counts, order, labels and the KV filter."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate.catalog import get_model, get_system
from aisimulate.spica.parallel import (
    GPUS_PER_WORKER,
    DisaggConfig,
    ReplicaConfig,
    WorkerShape,
    disagg_pairs,
    keep_viable,
    kv_tokens_per_rank,
    replica_configs,
    shapes_of,
    worker_shapes,
)


@pytest.mark.parametrize(
    ("moe", "budget", "expected"),
    [(False, 8, 15), (False, 32, 62), (True, 8, 28), (True, 72, 268)],
)
def test_agg_config_counts_match_the_reference(moe, budget, expected):
    assert len(replica_configs(moe=moe, gpu_budget=budget)) == expected


@pytest.mark.parametrize(
    ("moe", "budget", "minimum", "expected"),
    [(True, 8, None, 176), (True, 8, 8, 96), (False, 32, None, 1695), (True, 72, None, 33488)],
)
def test_disagg_pair_counts_match_the_reference(moe, budget, minimum, expected):
    assert len(disagg_pairs(moe=moe, gpu_budget=budget, min_gpu_budget=minimum)) == expected


def test_dense_replicas_per_worker_size():
    configs = replica_configs(moe=False, gpu_budget=8)
    by_size: dict[int, list[int]] = {}
    for c in configs:
        by_size.setdefault(c.shape.gpus, []).append(c.replicas)
    assert by_size == {1: list(range(1, 9)), 2: [1, 2, 3, 4], 4: [1, 2], 8: [1]}
    assert [c.shape.gpus for c in configs] == sorted(c.shape.gpus for c in configs)  # g ascending
    assert all(c.shape == WorkerShape(tp=c.shape.gpus) and c.shape.strategy == "tp" for c in configs)


def test_moe_gets_the_four_pure_patterns_and_none_on_one_gpu():
    for gpus in (2, 4, 8, 16):
        shapes = worker_shapes(gpus, moe=True)
        assert [s.strategy for s in shapes] == ["dep", "dtp", "tep", "tp"]
        assert shapes == [
            WorkerShape(attention_dp=gpus, moe_ep=gpus),
            WorkerShape(attention_dp=gpus, moe_tp=gpus),
            WorkerShape(tp=gpus, moe_ep=gpus),
            WorkerShape(tp=gpus, moe_tp=gpus),
        ]
        assert all(s.gpus == gpus for s in shapes)
    assert worker_shapes(1, moe=True) == []
    assert [s.strategy for s in worker_shapes(4, moe=True, allow_moe_pure_tp=False)] == ["dep", "tep"]


def test_mixed_splits_are_labelled_mixed():
    assert WorkerShape(tp=2, attention_dp=2, moe_ep=4).strategy == "mixed"
    assert WorkerShape(tp=4, moe_tp=2, moe_ep=2).strategy == "mixed"


def test_budget_floor_and_worker_size_floor():
    configs = replica_configs(moe=False, gpu_budget=8, min_gpu_budget=6)
    assert {c.total_gpus for c in configs} == {6, 7, 8}
    assert min(c.shape.gpus for c in replica_configs(moe=False, gpu_budget=8, min_gpus_per_worker=4)) == 4


def test_disagg_pairs_fit_the_budget_and_the_floor_binds_the_pair():
    pairs = disagg_pairs(moe=True, gpu_budget=8, min_gpu_budget=8)
    assert all(p.total_gpus == 8 for p in pairs)
    # A role smaller than the floor is fine when the pair reaches it: 2 prefill GPUs + 6 decode.
    assert any(p.prefill.total_gpus == 2 for p in pairs)
    unconstrained = disagg_pairs(moe=False, gpu_budget=32)
    assert all(2 <= p.total_gpus <= 32 for p in unconstrained)
    assert len(set(unconstrained)) == len(unconstrained)
    # Prefill is the outer loop.
    firsts = [p.prefill for p in unconstrained]
    assert firsts == sorted(firsts, key=firsts.index)


@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.parametrize("budget", [1, 3, 8, 20, 72])
def test_every_pool_entry_is_legal(moe, budget):
    for config in replica_configs(moe=moe, gpu_budget=budget):
        assert config.shape.gpus in GPUS_PER_WORKER and config.total_gpus <= budget
        assert config.shape.strategy != "mixed"
        assert config.shape.parallel_shape.num_gpus == config.shape.gpus
        moe_tp, moe_ep = config.shape.parallel_shape.expert_split
        assert not moe or moe_tp * moe_ep == config.shape.gpus
    for pair in disagg_pairs(moe=moe, gpu_budget=budget):
        assert pair.total_gpus <= budget


def test_kv_filter_drops_shapes_that_cannot_hold_one_sequence():
    model, system = get_model("meta-llama/Llama-3.1-70B"), get_system("h200_sxm")
    shapes = [WorkerShape(tp=g) for g in (1, 2, 4, 8)]
    tokens = kv_tokens_per_rank(shapes, model, system, backend="vllm", max_seq_len=8192)
    assert list(tokens) == shapes[1:]  # 140 GB of BF16 weights do not fit one 141 GB GPU
    assert tokens[shapes[1]] < tokens[shapes[2]] < tokens[shapes[3]]
    longest = tokens[shapes[1]]
    # A rank must hold strictly more than one max-length sequence.
    assert shapes[1] not in kv_tokens_per_rank(shapes, model, system, backend="vllm", max_seq_len=longest)
    assert kv_tokens_per_rank(shapes, model, system, backend="vllm", max_seq_len=10**8) == {}


def test_kv_filter_on_a_moe_model_and_the_pools_it_leaves():
    model, system = get_model("deepseek-ai/DeepSeek-V3"), get_system("h200_sxm")
    configs = replica_configs(moe=True, gpu_budget=16)
    tokens = kv_tokens_per_rank(shapes_of(configs), model, system, backend="sglang", max_seq_len=8192)
    assert {s.gpus for s in tokens} == {8, 16}  # 671B parameters need at least 8 H200s
    kept = keep_viable(configs, tokens)
    assert kept and all(c.shape.gpus >= 8 for c in kept)
    assert Counter(c.shape.strategy for c in kept) == {"dep": 3, "dtp": 3, "tep": 3, "tp": 3}
    pairs = disagg_pairs(moe=True, gpu_budget=16)
    assert keep_viable(pairs, tokens) == [
        DisaggConfig(ReplicaConfig(p, 1), ReplicaConfig(d, 1))
        for p in worker_shapes(8, moe=True)
        for d in worker_shapes(8, moe=True)
    ]


def test_shapes_of_lists_each_role_shape_once_in_order():
    pairs = disagg_pairs(moe=False, gpu_budget=4)
    assert shapes_of(pairs) == [WorkerShape(tp=1), WorkerShape(tp=2)]


@given(
    moe=st.booleans(),
    budget=st.integers(min_value=1, max_value=40),
    floor=st.one_of(st.none(), st.integers(min_value=1, max_value=40)),
    pure_tp=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_enumeration_respects_every_bound(moe, budget, floor, pure_tp):
    configs = replica_configs(moe=moe, gpu_budget=budget, min_gpu_budget=floor, allow_moe_pure_tp=pure_tp)
    assert len(set(configs)) == len(configs)
    for c in configs:
        assert (floor or 0) <= c.total_gpus <= budget
        assert c.shape in worker_shapes(c.shape.gpus, moe=moe, allow_moe_pure_tp=pure_tp)
    for pair in disagg_pairs(moe=moe, gpu_budget=budget, min_gpu_budget=floor, allow_moe_pure_tp=pure_tp):
        assert (floor or 0) <= pair.total_gpus <= budget
