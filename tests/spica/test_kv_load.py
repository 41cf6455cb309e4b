"""KV-load-derived concurrency: capacity per role and the concurrency a ratio asks for."""

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import InfeasibleError
from aisimulate.spica.kv_load import RoleBatching, kv_load, kv_tokens_of, role_capacity_tokens
from aisimulate.spica.parallel import ReplicaConfig, WorkerShape, kv_tokens_per_rank


def test_the_reference_worked_example():
    config = ReplicaConfig(WorkerShape(attention_dp=2, moe_ep=2), replicas=3)
    capacity = role_capacity_tokens(config, 10_000, 64)
    assert capacity == 9_984 * 2 * 3 == 59_904
    load = kv_load(0.5, {"agg": capacity}, isl=100, osl=100)
    assert (load.concurrency_capacity, load.concurrency) == (399, 199)
    assert load.capacity_tokens == {"agg": 59_904}


def test_tensor_and_expert_ranks_do_not_multiply_capacity():
    assert role_capacity_tokens(ReplicaConfig(WorkerShape(tp=8, moe_ep=8), 1), 6400, 64) == 6400


def test_decode_is_the_load_role_when_disaggregated_and_zero_ratio_is_one_user():
    load = kv_load(0.0, {"prefill": 10**9, "decode": 3_000}, isl=1000, osl=1000)
    assert load.concurrency_capacity == 2 and load.concurrency == 1
    assert kv_load(1.0, {"prefill": 10, "decode": 3_000}, isl=1000, osl=1000).concurrency == 2


def test_a_cache_too_small_for_one_request_is_infeasible():
    with pytest.raises(InfeasibleError, match="cannot hold one request of 1500 tokens"):
        kv_load(0.5, {"agg": 1_499}, isl=1000, osl=1000)
    with pytest.raises(InfeasibleError, match="isl and osl"):
        kv_load(0.5, {"agg": 10**6}, isl=0, osl=10)


def test_role_tokens_follow_the_selected_batching():
    model, system = get_model("meta-llama/Llama-3.1-70B"), get_system("h200_sxm")
    config = ReplicaConfig(WorkerShape(tp=4), 2)
    default = kv_tokens_of(config, RoleBatching(), model, system, backend="vllm")
    assert (
        default
        == kv_tokens_per_rank([config.shape], model, system, backend="vllm", max_seq_len=1)[config.shape]
    )
    leaner = kv_tokens_of(config, RoleBatching(gpu_memory_utilization=0.7), model, system, backend="vllm")
    bigger_batches = kv_tokens_of(
        config, RoleBatching(max_num_batched_tokens=65536), model, system, backend="vllm"
    )
    assert leaner < default and bigger_batches < default
    with pytest.raises(InfeasibleError, match="no KV budget for backend=vllm"):
        kv_tokens_of(ReplicaConfig(WorkerShape(tp=1), 1), RoleBatching(), model, system, backend="vllm")
