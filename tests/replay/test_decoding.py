"""The decode strategy is chosen once per rank, and both strategies and ledgers keep one interface."""

from __future__ import annotations

import pytest

from aisimulate.perf.polynomial import PolynomialPerfModel
from aisimulate.replay import EngineSpec
from aisimulate.replay.decoding import EXACT, LEDGER, DecodeStrategy
from aisimulate.replay.engine import Rank
from aisimulate.replay.ledger import BurstLedger, Ledger, OneTokenLedger
from aisimulate.replay.metrics import Collector
from aisimulate.replay.sglang import SglangRank
from aisimulate.replay.workers import RANK_CLASSES

from .conftest import burst, run


def test_both_ledgers_and_both_strategies_declare_one_interface():
    assert isinstance(OneTokenLedger(64), Ledger) and isinstance(BurstLedger(64), Ledger)
    assert isinstance(EXACT, DecodeStrategy) and isinstance(LEDGER, DecodeStrategy)
    assert not EXACT.plans_stretches and LEDGER.plans_stretches


@pytest.mark.parametrize(
    ("cls", "engine", "exact", "expected"),
    [
        (Rank, {}, False, LEDGER),
        (Rank, {}, True, EXACT),  # the user's switch
        # The ledger's step needs every decoder to fit the token budget, and LIFO victims.
        (Rank, {"max_num_seqs": 512, "max_num_batched_tokens": 256}, False, EXACT),
        (Rank, {"preemption_mode": "fifo"}, False, EXACT),
        # SGLang's decode pass steps every running request: no token budget, its own victims.
        (SglangRank, {"max_num_seqs": 512, "max_num_batched_tokens": 256}, False, LEDGER),
        (SglangRank, {"preemption_mode": "fifo"}, False, LEDGER),
        (SglangRank, {}, True, EXACT),
    ],
)
def test_a_rank_picks_its_decode_strategy_once(cls, engine, exact, expected):
    assert cls in RANK_CLASSES.values()
    spec = EngineSpec(num_gpu_blocks=1000, **engine)
    rank = cls(spec, "vllm", PolynomialPerfModel(), 1000, Collector(), exact=exact)
    assert rank.decoding is expected


@pytest.mark.parametrize("nextn", [0, 2])
def test_stepped_and_ledger_tokens_are_stamped_alike(nextn):
    # Token times per request (first, second, last) agree between the two strategies.
    workload = burst(12, 300, 40)
    kw = dict(num_gpu_blocks=400, nextn=nextn)
    fast = run(workload, **kw).requests
    exact = run(workload, exact=True, **kw).requests
    keys = ("ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "output_length")
    for a, b in zip(fast, exact, strict=True):
        for key in keys:
            assert a[key] == pytest.approx(b[key], rel=1e-9), key
