"""Objectives, ranking, Pareto front and hypervolume on plain report dicts."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate.spica.score import (
    OBJECTIVE_DIRECTIONS,
    OBJECTIVE_UNITS,
    Scored,
    avg_gpu,
    direction,
    dominates,
    hypervolume,
    is_feasible,
    objective_value,
    objective_vector,
    pareto_front,
    rank,
    score,
)

# Four GPUs held for half an hour: 2 GPU-hours over 1,800,000 ms.
REPORT = {
    "output_throughput_tok_s": 1000.0,
    "goodput_output_throughput_tok_s": 600.0,
    "mean_output_token_throughput_per_user": 40.0,
    "mean_e2e_latency_ms": 2500.0,
    "gpu_hours": 2.0,
    "duration_ms": 1_800_000.0,
}


def item(name, score_value=0.0, used_gpus=1, objectives=None):
    return Scored(score=score_value, used_gpus=used_gpus, payload=name, objectives=objectives)


def names(items):
    return [i.payload for i in items]


def test_every_target_has_its_direction():
    assert dict(OBJECTIVE_DIRECTIONS) == {
        "throughput": "max",
        "throughput_per_gpu": "max",
        "goodput": "max",
        "goodput_per_gpu": "max",
        "throughput_per_user": "max",
        "e2e_latency": "min",
        "cost_per_million_tokens": "min",
    }
    assert direction("e2e_latency") == "min" and direction("goodput") == "max"
    with pytest.raises(TypeError):
        OBJECTIVE_DIRECTIONS["throughput"] = "min"  # type: ignore[index]


def test_pareto_and_unknown_targets_have_no_direction():
    with pytest.raises(ValueError, match="no scalar direction"):
        direction("pareto")
    with pytest.raises(ValueError, match="unknown optimization target 'latency'"):
        direction("latency")


def test_avg_gpu_is_time_averaged():
    assert avg_gpu(REPORT) == 4.0
    assert avg_gpu({"gpu_hours": 3.0, "duration_ms": 3_600_000.0}) == 3.0
    assert avg_gpu({"gpu_hours": 2.0, "duration_ms": 0.0}) == 0.0
    assert avg_gpu({"duration_ms": 1000.0}) == 0.0
    assert avg_gpu({}) == 0.0


def test_objective_values_from_a_report():
    assert objective_value(REPORT, "throughput") == 1000.0
    assert objective_value(REPORT, "throughput_per_gpu") == 250.0
    assert objective_value(REPORT, "goodput") == 600.0
    assert objective_value(REPORT, "goodput_per_gpu") == 150.0
    assert objective_value(REPORT, "throughput_per_user") == 40.0
    assert objective_value(REPORT, "e2e_latency") == 2500.0


def test_missing_metrics_never_look_good():
    for target in ("throughput", "throughput_per_gpu", "goodput", "goodput_per_gpu", "throughput_per_user"):
        assert objective_value({}, target) == 0.0
    assert objective_value({}, "e2e_latency") == math.inf
    # A rate without a GPU count gives no per-GPU value rather than a division by zero.
    assert objective_value({"output_throughput_tok_s": 5.0}, "throughput_per_gpu") == 0.0


def test_cost_per_million_tokens():
    # 1000 tok/s for 1800 s = 1.8M tokens; 2 GPU-hours at $3 = $6 -> $6 / 1.8 per million.
    value = objective_value(REPORT, "cost_per_million_tokens", price_per_gpu_hour_usd=3.0)
    assert value == pytest.approx(6.0 / 1.8, rel=1e-12)
    no_output = {**REPORT, "output_throughput_tok_s": 0.0}
    assert objective_value(no_output, "cost_per_million_tokens", price_per_gpu_hour_usd=3.0) == math.inf
    assert objective_value({}, "cost_per_million_tokens", price_per_gpu_hour_usd=3.0) == math.inf
    with pytest.raises(ValueError, match="price_per_gpu_hour_usd"):
        objective_value(REPORT, "cost_per_million_tokens")


def test_objective_value_rejects_pareto_and_unknown_targets():
    with pytest.raises(ValueError, match="multi-objective"):
        objective_value(REPORT, "pareto")
    with pytest.raises(ValueError, match="unknown optimization target"):
        objective_value(REPORT, "tokens_per_dollar")
    with pytest.raises(ValueError, match="multi-objective"):
        score(REPORT, "pareto")


def test_score_is_higher_is_better():
    assert score(REPORT, "throughput") == 1000.0
    assert score(REPORT, "goodput_per_gpu") == 150.0
    assert score(REPORT, "e2e_latency") == -2500.0
    assert score({}, "e2e_latency") == -math.inf
    cost = score(REPORT, "cost_per_million_tokens", price_per_gpu_hour_usd=3.0)
    assert cost == pytest.approx(-6.0 / 1.8, rel=1e-12)
    assert score({}, "cost_per_million_tokens", price_per_gpu_hour_usd=3.0) == -math.inf


def test_objective_vector_keeps_raw_values_in_order():
    vector = objective_vector(
        REPORT, ["e2e_latency", "throughput_per_gpu", "cost_per_million_tokens"], price_per_gpu_hour_usd=3.0
    )
    assert list(vector) == ["e2e_latency", "throughput_per_gpu", "cost_per_million_tokens"]
    assert vector["e2e_latency"] == 2500.0  # not negated
    assert vector["throughput_per_gpu"] == 250.0
    assert vector["cost_per_million_tokens"] == pytest.approx(6.0 / 1.8)
    with pytest.raises(ValueError, match="unknown optimization target"):
        objective_vector(REPORT, ["throughput", "speed"])


def test_feasibility_is_the_gpu_budget_only():
    assert is_feasible(8, 8)
    assert is_feasible(1, 8)
    assert not is_feasible(9, 8)


def test_rank_best_first_then_fewer_gpus_then_insertion_order():
    items = [
        item("a", 10.0, 8),
        item("b", 20.0, 8),
        item("c", 10.0, 4),
        item("d", -math.inf, 1),
        item("e", 10.0, 4),
        item("f", 20.0, 2),
    ]
    assert names(rank(items)) == ["f", "b", "c", "e", "a", "d"]
    assert names(rank(iter(items))) == ["f", "b", "c", "e", "a", "d"]
    assert rank([]) == []


def test_dominance_respects_each_direction():
    objectives = ["throughput", "e2e_latency"]
    fast_low = {"throughput": 10.0, "e2e_latency": 100.0}
    fast_high = {"throughput": 10.0, "e2e_latency": 200.0}
    slow_low = {"throughput": 5.0, "e2e_latency": 100.0}
    assert dominates(fast_low, fast_high, objectives)  # lower latency is better
    assert not dominates(fast_high, fast_low, objectives)
    assert dominates(fast_low, slow_low, objectives)
    assert not dominates(fast_high, slow_low, objectives)  # a trade-off
    assert not dominates(slow_low, fast_high, objectives)
    assert not dominates(fast_low, dict(fast_low), objectives)  # equal is not dominating


def test_dominance_uses_exact_floats():
    objectives = ["throughput", "throughput_per_user"]
    a = {"throughput": math.nextafter(1.0, 2.0), "throughput_per_user": 1.0}
    b = {"throughput": 1.0, "throughput_per_user": 1.0}
    assert dominates(a, b, objectives)
    assert not dominates(b, a, objectives)


def test_dominance_rejects_non_scalar_objectives():
    with pytest.raises(ValueError, match="unknown optimization target"):
        dominates({"x": 1.0}, {"x": 0.0}, ["x"])


def test_pareto_front_keeps_non_dominated_sorted_by_last_objective():
    objectives = ["e2e_latency", "throughput_per_gpu"]
    items = [
        item("slow_big", objectives={"e2e_latency": 900.0, "throughput_per_gpu": 300.0}),
        item("dominated", objectives={"e2e_latency": 800.0, "throughput_per_gpu": 100.0}),
        item("fast_small", objectives={"e2e_latency": 100.0, "throughput_per_gpu": 50.0}),
        item("no_vector"),
        item("middle", objectives={"e2e_latency": 500.0, "throughput_per_gpu": 200.0}),
        item("middle_twin", objectives={"e2e_latency": 500.0, "throughput_per_gpu": 200.0}),
    ]
    front = pareto_front(items, objectives)
    assert names(front) == ["fast_small", "middle", "middle_twin", "slow_big"]


def test_pareto_front_rejects_incomplete_vectors():
    items = [item("full", objectives={"throughput": 1.0, "e2e_latency": 9.0})]
    items.append(item("partial", objectives={"throughput": 5.0}))
    with pytest.raises(ValueError, match=r"lacks \['e2e_latency'\]"):
        pareto_front(items, ["throughput", "e2e_latency"])


def test_pareto_front_edge_cases():
    assert pareto_front([], ["throughput", "e2e_latency"]) == []
    assert pareto_front([item("no_vector")], ["throughput", "e2e_latency"]) == []
    with pytest.raises(ValueError, match="at least one objective"):
        pareto_front([item("a", objectives={"throughput": 1.0})], [])


def test_hypervolume_2d_staircase():
    points = [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]
    assert hypervolume(points, (0.0, 0.0), ("max", "max")) == 6.0
    assert hypervolume(points[::-1], (0.0, 0.0), ("max", "max")) == 6.0
    # A dominated point and a point not beyond the reference add nothing.
    assert hypervolume([*points, (1.0, 1.0), (5.0, 0.0)], (0.0, 0.0), ("max", "max")) == 6.0
    # Only (2, 2) is strictly beyond (1, 1); the other two touch its edges.
    assert hypervolume(points, (1.0, 1.0), ("max", "max")) == 1.0
    # Slabs along x: [0.5, 1] reaches y = 3 (area 1), [1, 2] reaches y = 2 (area 1).
    assert hypervolume(points, (0.5, 1.0), ("max", "max")) == 0.5 * 2 + 1.0 * 1


def test_hypervolume_of_minimised_objectives_uses_raw_reference():
    # Latency in ms, reference 10 ms: the same staircase as above, mirrored.
    points = [(1.0, 7.0), (2.0, 8.0), (3.0, 9.0)]
    assert hypervolume(points, (0.0, 10.0), ("max", "min")) == 6.0
    assert hypervolume([(1.0, 10.0), (1.0, 11.0)], (0.0, 10.0), ("max", "min")) == 0.0
    assert hypervolume([(2.0, 3.0)], (5.0, 4.0), ("min", "min")) == 3.0


def test_hypervolume_small_cases():
    assert hypervolume([], (0.0, 0.0), ("max", "max")) == 0.0
    assert hypervolume([(3.0,), (5.0,)], (1.0,), ("max",)) == 4.0
    assert hypervolume([(1.0, 1.0, 1.0)], (0.0, 0.0, 0.0), ("max", "max", "max")) == 1.0
    # Three 2x1x1 boxes: 3*2 - 3*1 + 1 by inclusion-exclusion.
    boxes = [(2.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.0, 1.0, 2.0)]
    assert hypervolume(boxes, (0.0, 0.0, 0.0), ("max", "max", "max")) == 4.0


def test_hypervolume_rejects_malformed_input():
    with pytest.raises(ValueError, match="2 coordinates but 3 directions"):
        hypervolume([], (0.0, 0.0), ("max", "max", "min"))
    with pytest.raises(ValueError, match="0 coordinates but 0 directions"):
        hypervolume([], (), ())
    with pytest.raises(ValueError, match="expected 2"):
        hypervolume([(1.0, 2.0, 3.0)], (0.0, 0.0), ("max", "max"))
    with pytest.raises(ValueError, match="'max' or 'min'"):
        hypervolume([], (0.0, 0.0), ("max", "up"))  # type: ignore[arg-type]


def grid_hypervolume(points, reference):
    """Exact union volume by cutting space at every coordinate: a cell is covered when one point
    reaches its upper corner (maximisation only)."""
    axes = [
        sorted({reference[k], *(p[k] for p in points if p[k] > reference[k])}) for k in range(len(reference))
    ]
    total = 0.0
    for cell in itertools.product(*(range(len(axis) - 1) for axis in axes)):
        upper = [axes[k][c + 1] for k, c in enumerate(cell)]
        if any(all(p[k] >= upper[k] for k in range(len(upper))) for p in points):
            total += math.prod(axes[k][c + 1] - axes[k][c] for k, c in enumerate(cell))
    return total


SCALAR_TARGETS = sorted(OBJECTIVE_DIRECTIONS)


@st.composite
def point_sets(draw):
    objectives = draw(st.lists(st.sampled_from(SCALAR_TARGETS), min_size=2, max_size=4, unique=True))
    values = st.integers(0, 6).map(float)
    vectors = draw(st.lists(st.fixed_dictionaries({o: values for o in objectives}), max_size=12))
    return objectives, vectors


@given(point_sets())
def test_front_is_mutually_non_dominated_and_dominates_the_rest(data):
    objectives, vectors = data
    items = [item(i, objectives=v) for i, v in enumerate(vectors)]
    front = pareto_front(items, objectives)
    members = {i.payload for i in front}
    for a in front:
        for b in front:
            assert not dominates(a.objectives, b.objectives, objectives)
    for other in items:
        if other.payload not in members:
            assert any(dominates(m.objectives, other.objectives, objectives) for m in front)
    keys = [i.objectives[objectives[-1]] for i in front]
    assert keys == sorted(keys)


@settings(max_examples=60)
@given(point_sets())
def test_hypervolume_of_front_equals_all_points_and_grid(data):
    objectives, vectors = data
    directions = [OBJECTIVE_DIRECTIONS[o] for o in objectives]
    reference = [0.0 if d == "max" else 6.0 for d in directions]
    points = [[v[o] for o in objectives] for v in vectors]
    front = pareto_front([item(i, objectives=v) for i, v in enumerate(vectors)], objectives)
    front_points = [[i.objectives[o] for o in objectives] for i in front]
    volume = hypervolume(points, reference, directions)
    assert hypervolume(front_points, reference, directions) == volume
    signs = [1.0 if d == "max" else -1.0 for d in directions]
    flipped = [[s * x for s, x in zip(signs, p, strict=True)] for p in points]
    assert volume == grid_hypervolume(flipped, [s * r for s, r in zip(signs, reference, strict=True)])


def test_every_objective_has_a_unit_for_labels():
    assert set(OBJECTIVE_UNITS) == set(OBJECTIVE_DIRECTIONS)
