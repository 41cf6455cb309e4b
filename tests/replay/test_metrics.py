import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisimulate.replay import metrics
from aisimulate.replay.metrics import (
    Collector,
    distribution,
    rank_of,
    reciprocal,
    reverse_in_place,
    sort_weighted,
    sorted_distribution,
)
from aisimulate.replay.plan import SLA
from aisimulate.replay.request import Request
from aisimulate.workload.request import RequestSpec

from .conftest import burst, run


def test_nearest_rank_rounds_half_away_from_zero():
    assert rank_of(5, 50) == 2
    assert rank_of(4, 50) == 2  # 1.5 rounds up, unlike Python's round
    assert rank_of(2, 50) == 1
    assert rank_of(100, 99) == 98


def test_distribution_of_a_small_sample():
    stats = distribution(np.array([5.0, 1.0, 3.0, 2.0, 4.0]))
    assert stats["mean"] == 3 and stats["min"] == 1 and stats["max"] == 5
    assert stats["median"] == 3 and stats["p90"] == 5 and stats["p75"] == 4
    assert stats["std"] == pytest.approx(np.sqrt(2))


@given(st.lists(st.tuples(st.floats(0, 1e4, allow_nan=False), st.integers(1, 5)), min_size=1, max_size=30))
def test_weighted_statistics_equal_the_expanded_sample(pairs):
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    expanded = np.repeat(values, weights)
    a, b = distribution(values, weights), distribution(expanded)
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-9), key


# Gaps are zero (a burst's extra tokens) or at least a microsecond: 1000 / gap stays finite.
GAPS = st.one_of(st.just(0.0), st.floats(1e-3, 1e4, allow_nan=False))


@given(st.lists(st.tuples(GAPS, st.integers(1, 5)), min_size=1, max_size=30))
def test_per_user_rates_reuse_the_sorted_gaps(pairs):
    gaps = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    positive = gaps > 0
    direct = distribution(1000.0 / gaps[positive], weights[positive]) if positive.any() else {}
    rates = sorted_distribution(*reciprocal(*sort_weighted(gaps, weights), 1000.0))
    assert rates.keys() == direct.keys()
    # A std of equal rates is zero up to rounding of the largest rate (summed in another order).
    scale = direct["max"] if direct else 0.0
    for key in direct:
        assert rates[key] == pytest.approx(direct[key], rel=1e-12, abs=1e-12 * scale), key


def test_goodput_counts_requests_meeting_every_target():
    # Eight prompts at once: the first batch's TTFT is short, the last ones wait.
    rep = run(burst(8, 2048, 10), sla=SLA(ttft_ms=200))
    s = rep.summary
    ttfts = sorted(r["ttft_ms"] for r in rep.requests)
    meeting = sum(1 for t in ttfts if t <= 200)
    assert 0 < meeting < 8
    assert s["goodput_completed_requests"] == meeting
    assert s["goodput_request_throughput_rps"] == pytest.approx(meeting / (s["duration_ms"] / 1000))
    strict = run(burst(8, 2048, 10), sla=SLA(itl_ms=0.5)).summary
    assert strict["goodput_completed_requests"] == 0
    assert "goodput_completed_requests" not in run(burst(2, 64, 4)).summary


def test_summary_formulas_on_a_tiny_case():
    rep = run(burst(2, 512, 5))
    s, recs = rep.summary, rep.requests
    assert s["total_input_tokens"] == 1024 and s["total_output_tokens"] == 10
    assert s["duration_ms"] == max(r["last_token_ms"] for r in recs)
    assert s["output_throughput_tok_s"] == pytest.approx(10 / (s["duration_ms"] / 1000))
    tpots = [(r["last_token_ms"] - r["first_token_ms"]) / 4 for r in recs]
    assert s["mean_tpot_ms"] == pytest.approx(np.mean(tpots))
    # Pooled ITL: 4 gaps per request, all gaps of both requests.
    assert s["num_itl_samples"] == 8
    assert s["mean_itl_ms"] == pytest.approx(np.mean(tpots))  # equal outputs: same mean
    assert s["mean_e2e_latency_ms"] == pytest.approx(np.mean([r["e2e_latency_ms"] for r in recs]))
    assert s["gpu_hours"] == pytest.approx(s["duration_ms"] / 3.6e6)
    assert s["decode_gpus_per_worker"] == 1 and s["prefill_worker_seconds"] == 0


def test_stretch_gaps_are_differenced_within_each_stretch_only():
    collector = Collector()
    collector.gap(7.0, 1)
    collector.gaps([0.0, 1.0, 3.0], 2)  # two passes of a stretch: gaps 1 and 2, two decoders each
    collector.gaps([10.0, 14.0], 5)  # the 3 -> 10 step between stretches is no gap
    values, weights = collector.take_gaps()
    assert values.tolist() == [7.0, 1.0, 2.0, 4.0]
    assert weights.tolist() == [1, 2, 2, 5]
    assert [a.size for a in collector.take_gaps()] == [0, 0]  # handed over: the report's only
    assert collector.emitted_tokens == 1 + 2 * 2 + 5
    assert distribution(values, weights)["mean"] == pytest.approx((7 + 2 + 4 + 20) / 10)


def test_a_hidden_collector_counts_admissions_but_forgets_finished_requests():
    # A prefill pool's collector: its prompts' decode copies are the ones reported; the main one
    # keeps finished requests as columns, and whole only for per-request records.
    main = Collector()
    records = Collector(keep_requests=True)
    hidden = Collector(on_admission=main.admission_counted, keep_finished=False)
    spec = RequestSpec(
        request_id=0,
        session_id=0,
        turn=0,
        input_tokens=10,
        output_tokens=1,
        hash_ids=(),
        hash_block_tokens=16,
    )
    req = Request.from_spec(spec, 0.0, 16, max_model_len=None)
    hidden.admission(req, 0, 0.0)
    req.first_token_ms = req.last_token_ms = 5.0
    req.generated = 1
    hidden.finish(req)
    main.finish(req)
    records.finish(req)
    assert main.committed_prefill_tokens == 10 and len(hidden.done) == 0 and hidden.finished == []
    assert len(main.done) == 1 and main.finished == [] and records.finished == [req]
    assert list(main.done.output_tokens) == [1] and math.isnan(main.done.second_token_ms[0])


def test_large_samples_are_handled_in_blocks_with_the_same_result(monkeypatch):
    # Gaps and their statistics are built and reversed a block at a time (bounded temporaries):
    # any block size gives exactly what one block does.
    rng = np.random.default_rng(5)

    def summary_of_a_collector():
        collector = Collector()
        for _ in range(40):
            ends = np.cumsum(rng.choice([0.0, 1.5, 2.25, 7.0], size=rng.integers(2, 9)))
            collector.gaps(ends.tolist(), int(rng.integers(1, 4)))
            collector.gap(float(rng.choice([0.0, 3.0])), int(rng.integers(1, 3)))
        gaps, weights = collector.take_gaps()
        ordered, ordered_weights = sort_weighted(gaps, weights)
        itl = sorted_distribution(ordered, ordered_weights)
        rates = sorted_distribution(*reciprocal(ordered, ordered_weights, 1000.0))
        return gaps.size, itl, rates

    whole = summary_of_a_collector()
    rng = np.random.default_rng(5)
    monkeypatch.setattr(metrics, "BLOCK", 3)
    blocked = summary_of_a_collector()
    assert whole[0] > 3 * 20 and blocked == whole
    for size in (0, 1, 6, 7, 20):
        a = np.arange(size, dtype=np.float64)
        reverse_in_place(a)
        assert a.tolist() == list(range(size))[::-1]
