"""TRT-LLM's disaggregated decode workers hide the per-pass framework overhead behind the kernels
(its overlap scheduler); its prefill and aggregated workers keep the fitted additive overhead."""

import dataclasses

import pytest

from aisimulate.catalog import backends
from aisimulate.catalog.backends import BACKEND_PROFILES, backend_profile
from aisimulate.perf.model import BatchShape
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.workers import resolve_engine
from aisimulate.workload import SyntheticWorkload

DECODE = BatchShape(decode_requests=32, decode_context_tokens=32 * 1500)


def _plan(backend="trtllm"):
    engine = EngineSpec(num_gpu_blocks=16384, tp=4)
    return DeploymentPlan(
        model="openai/gpt-oss-120b",
        system="gb200",
        backend=backend,
        mode="disagg",
        prefill=engine,
        decode=engine,
        frontend_latency_ms=0,
        kv_transfer_latency_ms=0,
    )


def _engine(plan, role):
    spec = {name: spec for name, spec, _ in plan.pools()}[role]
    return resolve_engine(plan, spec, perf="analytic", perf_table=None, where=role, role=role)


def test_only_trtllm_overlaps_its_decode_workers_overhead():
    assert [name for name, p in BACKEND_PROFILES.items() if p.decode_workers_overlap_overhead] == ["trtllm"]


def test_a_decode_workers_pass_lasts_the_longer_of_kernels_and_overhead():
    plan = _plan()
    decode, prefill = _engine(plan, "decode"), _engine(plan, "prefill")
    parts = decode.perf.explain(DECODE)
    additive = prefill.perf.explain(DECODE)  # the prefill worker's model: same kernels, overhead on top
    kernels = parts.gemm_ms + parts.attention_ms + parts.moe_ms + parts.comm_ms
    assert kernels == pytest.approx(
        additive.gemm_ms + additive.attention_ms + additive.moe_ms + additive.comm_ms
    )
    assert additive.overhead_ms > 0
    assert prefill.perf.pass_time_ms(DECODE) == pytest.approx(kernels + additive.overhead_ms)
    assert decode.perf.pass_time_ms(DECODE) == pytest.approx(max(kernels, additive.overhead_ms))
    # Only the pricing changes: admission and the first token's timing stay synchronous.
    assert not decode.async_scheduling and not prefill.async_scheduling


def test_an_aggregated_worker_keeps_the_additive_overhead():
    spec = EngineSpec(num_gpu_blocks=16384, tp=4)
    plan = DeploymentPlan(model="openai/gpt-oss-120b", system="gb200", backend="trtllm", agg=spec)
    agg = resolve_engine(plan, spec, perf="analytic", perf_table=None, where="agg", role="agg")
    parts = agg.perf.explain(DECODE)
    total = parts.gemm_ms + parts.attention_ms + parts.moe_ms + parts.comm_ms + parts.overhead_ms
    assert agg.perf.pass_time_ms(DECODE) == pytest.approx(total)
    assert parts.overhead_ms == pytest.approx(
        agg.perf.calibration.overhead.base_ms + 32 * agg.perf.calibration.overhead.per_sequence_ms
    )


def test_the_replays_token_gaps_follow_the_overlapped_pass(monkeypatch):
    workload = SyntheticWorkload(isl=1024, osl=64, num_requests=32, concurrency=32)

    def tpot():
        return simulate(_plan(), workload, perf="analytic").summary["mean_tpot_ms"]

    overlapped = tpot()
    additive = dataclasses.replace(backend_profile("trtllm"), decode_workers_overlap_overhead=False)
    monkeypatch.setitem(backends.BACKEND_PROFILES, "trtllm", additive)
    # 32 sequences a pass: TRT-LLM's fitted overhead (about 1.4 ms) no longer adds to every gap.
    assert overlapped < tpot() - 0.5
