"""Latent features of a branch's layouts, the parameters built from them, and the projection."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate.spica.parallel import ReplicaConfig, WorkerShape, disagg_pairs, replica_configs
from aisimulate.spica.projection import ParallelSpace, PoolEntry, _log_midpoint

BOTH = frozenset({"vllm", "sglang"})


def space(configs, budget, backends=BOTH):
    return ParallelSpace([PoolEntry(c, backends) for c in configs], budget)


MOE_AGG = space(replica_configs(moe=True, gpu_budget=8), 8)
DENSE_AGG = space(replica_configs(moe=False, gpu_budget=32), 32)
MOE_DISAGG = space(disagg_pairs(moe=True, gpu_budget=16), 16)


def test_agg_parameters_in_order_with_their_defaults():
    assert [(p.name, p.kind, p.domain, p.default) for p in MOE_AGG.params] == [
        ("used_gpu_ratio", "float", (0.25, 1.0), 1.0),
        ("agg_num_gpus_per_engine_target", "discrete", (2.0, 4.0, 8.0), 4.0),
        ("agg_attention_mode", "categorical", ("tp", "dp"), "tp"),
        ("agg_ffn_mode", "categorical", ("ep", "tp"), "ep"),
    ]
    # A dense pool has no FFN mode, and one attention mode: a constant the optimizer never sees.
    assert [p.name for p in DENSE_AGG.params][-1] == "agg_attention_mode"
    assert [p.name for p in DENSE_AGG.searchable] == ["used_gpu_ratio", "agg_num_gpus_per_engine_target"]


def test_disagg_parameters_in_order():
    assert [p.name for p in MOE_DISAGG.params] == [
        "used_gpu_ratio",
        "prefill_gpu_share",
        "prefill_num_gpus_per_engine_target",
        "decode_num_gpus_per_engine_target",
        "prefill_attention_mode",
        "decode_attention_mode",
        "prefill_ffn_mode",
        "decode_ffn_mode",
    ]
    share = MOE_DISAGG.params[1]
    assert share.default == 0.5 and share.domain[0] < 0.5 < share.domain[1]


def test_gpus_per_engine_default_is_the_log_midpoint_ties_to_the_smaller():
    assert _log_midpoint([1.0, 4.0, 16.0]) == 4.0
    assert _log_midpoint([1.0, 2.0, 4.0, 8.0, 16.0]) == 4.0
    assert _log_midpoint([2.0, 4.0]) == 2.0


def test_features_of_a_config():
    config = ReplicaConfig(WorkerShape(attention_dp=4, moe_ep=4), 1)
    assert MOE_AGG.features(config) == {
        "used_gpu_ratio": 0.5,
        "agg_num_gpus_per_engine_target": 4.0,
        "agg_attention_mode": "dp",
        "agg_ffn_mode": "ep",
    }


def test_defaults_project_exactly_and_modes_win_over_distance():
    exact = MOE_AGG.project({}, "vllm")
    assert exact.config == ReplicaConfig(WorkerShape(tp=4, moe_ep=4), 2)
    assert exact.distance == 0 and not exact.mode_projected
    # Asking for dp attention at 3 GPUs: no 3-GPU engine, so the nearest dp engine (2 or 4 GPUs).
    near = MOE_AGG.project({"agg_attention_mode": "dp", "agg_num_gpus_per_engine_target": 3.0}, "vllm")
    assert near.actual["agg_attention_mode"] == "dp" and near.distance > 0


def test_a_missing_mode_falls_back_and_says_so():
    pool = [PoolEntry(ReplicaConfig(WorkerShape(tp=g, moe_ep=g), 1), BOTH) for g in (2, 4)]
    pool.append(PoolEntry(ReplicaConfig(WorkerShape(attention_dp=2, moe_ep=2), 1), frozenset({"sglang"})))
    branch = ParallelSpace(pool, 4)
    projected = branch.project({"agg_attention_mode": "dp"}, "vllm")  # vllm has no dp config here
    assert projected.mode_projected and projected.actual["agg_attention_mode"] == "tp"
    assert branch.project({"agg_attention_mode": "dp"}, "sglang").config.shape.attention_dp == 2
    with pytest.raises(ValueError, match="has no valid parallel config in this branch"):
        branch.project({}, "trtllm")


def test_ties_break_on_the_shape_key():
    # Two 4-GPU configs equally far (in log GPUs) from a 2.83-GPU engine: the smaller key, tp first, wins.
    branch = space([ReplicaConfig(WorkerShape(tp=2), 2), ReplicaConfig(WorkerShape(tp=4), 1)], 4)
    assert branch.project({"agg_num_gpus_per_engine_target": 2.0**1.5}, "vllm").config.shape.tp == 2


def test_metadata_records_the_choice():
    meta = MOE_DISAGG.project({}, "vllm").metadata()
    assert set(meta) == {
        "requested_features",
        "actual_features",
        "projection_distance",
        "mode_projected",
        "actual_parallel_config",
    }
    assert set(meta["actual_parallel_config"]) == {"prefill", "decode"}


@pytest.mark.parametrize(
    "branch", [MOE_AGG, DENSE_AGG, MOE_DISAGG], ids=["moe-agg", "dense-agg", "moe-disagg"]
)
def test_every_config_round_trips_to_itself(branch):
    for entry in branch.pool:
        projected = branch.project(branch.features(entry.config), "vllm")
        assert projected.config == entry.config and projected.distance == 0


@given(data=st.data())
@settings(max_examples=80, deadline=None)
def test_any_latent_point_projects_to_a_legal_config(data):
    branch = data.draw(st.sampled_from([MOE_AGG, DENSE_AGG, MOE_DISAGG]))
    requested = {}
    for p in branch.params:
        if p.kind == "float":
            requested[p.name] = data.draw(st.floats(min_value=p.domain[0], max_value=p.domain[1]))
        else:
            requested[p.name] = data.draw(st.sampled_from(p.domain))
    projected = branch.project(requested, data.draw(st.sampled_from(sorted(BOTH))))
    assert projected.config in {e.config for e in branch.pool}
    assert projected.distance >= 0
