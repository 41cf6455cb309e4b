"""The replay's answer: a flat summary (the reference replay's key names), plus opt-in
per-request records and a timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aisimulate.replay.metrics import (
    Collector,
    add_family,
    distribution,
    reciprocal,
    sort_weighted,
    sorted_distribution,
)
from aisimulate.replay.plan import SLA
from aisimulate.replay.request import Request


@dataclass(frozen=True, kw_only=True)
class Report:
    summary: dict[str, Any]
    perf_model: str
    requests: list[dict[str, Any]] | None = None
    timeline: list[dict[str, Any]] | None = None
    # Under a planner: the fleet per role after every change (active, starting, draining) and
    # the planner's scaling decisions.
    replicas: list[dict[str, Any]] | None = None
    planner_events: list[dict[str, Any]] | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"summary": self.summary, "perf_model": self.perf_model, "config": self.config}
        for key in ("requests", "timeline", "replicas", "planner_events"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True, kw_only=True)
class Fleet:
    """What was provisioned, for cost accounting: the starting workers and, under a planner,
    every later change as (time, billing role, workers provisioned from then on)."""

    prefill_workers: int
    decode_workers: int  # aggregated workers count as decode, as in the reference
    prefill_gpus_per_worker: int
    decode_gpus_per_worker: int
    changes: tuple[tuple[float, str, int], ...] = ()

    def worker_seconds(self, role: str, horizon_ms: float) -> float:
        """Provisioned workers of ``role`` integrated over [0, horizon]."""
        count = self.prefill_workers if role == "prefill" else self.decode_workers
        total_ms = since = 0.0
        for at, who, provisioned in self.changes:
            if who != role:
                continue
            at = min(at, horizon_ms)
            total_ms += count * (at - since)
            count, since = provisioned, at
        return (total_ms + count * max(horizon_ms - since, 0.0)) / 1000.0


def ttst_ms(r: Request) -> float | None:
    """From r's first token to its second (None when it emitted fewer than two)."""
    if r.first_token_ms is None or r.second_token_ms is None:
        return None
    return r.second_token_ms - r.first_token_ms


def summarize(
    collector: Collector,
    *,
    num_requests: int,
    fleet: Fleet,
    sla: SLA | None,
    perf_model: str,
    preemptions: int,
    max_kv_usage_ratio: float,
    wall_time_ms: float,
) -> dict[str, Any]:
    done = collector.done
    n = len(done)
    arrival = np.frombuffer(done.arrival_ms, dtype=np.float64)
    first = np.frombuffer(done.first_token_ms, dtype=np.float64)
    last = np.frombuffer(done.last_token_ms, dtype=np.float64)
    out_len = np.frombuffer(done.output_tokens, dtype=np.int64)
    in_len = np.frombuffer(done.input_tokens, dtype=np.int64)
    duration = float(last.max()) if n else 0.0
    seconds = duration / 1000.0
    summary: dict[str, Any] = {
        "num_requests": num_requests,
        "completed_requests": n,
        "rejected_requests": len(collector.rejected),
        "total_input_tokens": int(in_len.sum()),
        "total_output_tokens": int(out_len.sum()),
        "committed_prefill_tokens": collector.committed_prefill_tokens,
        "duration_ms": duration,
    }
    rate = (lambda x: x / seconds) if seconds > 0 else (lambda x: 0.0)
    summary["request_throughput_rps"] = rate(n)
    summary["input_throughput_tok_s"] = rate(int(in_len.sum()))
    summary["output_throughput_tok_s"] = rate(int(out_len.sum()))
    summary["total_throughput_tok_s"] = rate(int(in_len.sum() + out_len.sum()))

    ttft = first - arrival
    e2e = last - arrival
    multi = out_len > 1
    tpot = (last[multi] - first[multi]) / (out_len[multi] - 1)
    second = np.frombuffer(done.second_token_ms, dtype=np.float64)
    two = ~np.isnan(second)
    ttst = second[two] - first[two]
    gaps, weights = collector.take_gaps()
    itl_samples = int(weights.sum())
    add_family(summary, "ttft", distribution(ttft))
    add_family(summary, "ttst", distribution(ttst))
    add_family(summary, "tpot", distribution(tpot))
    gaps, weights = sort_weighted(gaps, weights)
    add_family(summary, "itl", sorted_distribution(gaps, weights))
    add_family(summary, "e2e_latency", distribution(e2e))
    # tok/s per user: 1000 / gap over the positive gaps (a burst's extra tokens share a pass end)
    add_family(
        summary,
        "output_token_throughput_per_user",
        sorted_distribution(*reciprocal(gaps, weights, 1000.0)),
        "",
    )
    summary["num_ttft_samples"] = n
    summary["num_tpot_samples"] = int(tpot.size)
    summary["num_e2e_latency_samples"] = n
    summary["num_itl_samples"] = itl_samples

    if sla is not None:
        ok = np.ones(n, dtype=bool)
        if sla.ttft_ms is not None:
            ok &= ttft <= sla.ttft_ms
        if sla.e2e_ms is not None:
            ok &= e2e <= sla.e2e_ms
        if sla.itl_ms is not None:
            mean_itl = np.where(multi, (e2e - ttft) / np.maximum(out_len - 1, 1), 0.0)
            ok &= ~multi | (mean_itl <= sla.itl_ms)
        summary["goodput_completed_requests"] = int(ok.sum())
        summary["goodput_request_throughput_rps"] = rate(int(ok.sum()))
        summary["goodput_output_throughput_tok_s"] = rate(int(out_len[ok].sum()))

    prefill_s = fleet.worker_seconds("prefill", duration)
    decode_s = fleet.worker_seconds("decode", duration)
    gpu_hours = (prefill_s * fleet.prefill_gpus_per_worker + decode_s * fleet.decode_gpus_per_worker) / 3600.0
    summary.update(
        prefill_worker_seconds=prefill_s,
        decode_worker_seconds=decode_s,
        prefill_gpus_per_worker=fleet.prefill_gpus_per_worker,
        decode_gpus_per_worker=fleet.decode_gpus_per_worker,
        gpu_hours=gpu_hours,
        avg_gpu=gpu_hours * 3600.0 / seconds if seconds > 0 else 0.0,
    )
    total_in = int(in_len.sum())
    summary["prefix_cache_reused_ratio"] = sum(done.max_reused_tokens) / total_in if total_in else 0.0
    summary["first_admission_prefix_cache_reused_ratio"] = (
        sum(done.first_reused_tokens) / total_in if total_in else 0.0
    )
    if collector.decode_step_tokens > collector.decode_steps:  # speculative decoding ran
        summary["mean_tokens_per_step"] = collector.decode_step_tokens / collector.decode_steps
    if collector.tiers_enabled:
        summary["host_cache_hit_ratio"] = collector.host_hit_tokens / total_in if total_in else 0.0
        summary["disk_cache_hit_ratio"] = collector.disk_hit_tokens / total_in if total_in else 0.0
        summary["mean_onboard_ms"] = float(np.mean(collector.onboard_ms)) if collector.onboard_ms else 0.0
    if collector.held_ms:
        summary["router_queued_requests"] = len(collector.held_ms)
        summary["mean_router_queue_ms"] = float(np.mean(collector.held_ms))
    if collector.transfer_ms:
        summary["kv_transfer_ms_mean"] = float(np.mean(collector.transfer_ms))
    summary["preemptions"] = preemptions
    summary["max_kv_usage_ratio"] = max_kv_usage_ratio
    summary["perf_model"] = perf_model
    summary["wall_time_ms"] = wall_time_ms
    return summary


def request_records(collector: Collector) -> list[dict[str, Any]]:
    rows = []
    for r in sorted(collector.finished + collector.rejected, key=lambda r: r.rid):
        done = not r.rejected
        row: dict[str, Any] = {
            "request_id": r.rid,
            "session_id": r.spec.session_id,
            "turn_index": r.spec.turn,
            "status": "completed" if done else "rejected",
            "arrival_time_ms": r.arrival_ms,
            "first_admit_ms": r.first_admit_ms,
            "first_token_ms": r.first_token_ms,
            "last_token_ms": r.last_token_ms,
            "input_length": r.prompt_len,
            "requested_output_length": r.spec.output_tokens,
            "output_length": r.generated,
            "reused_input_tokens": r.max_reused_tokens,
            "worker_idx": r.worker,
            "dp_rank": r.rank,
            "prefill_worker_idx": r.prefill_worker if r.prefill_worker >= 0 else None,
            "kv_transfer_ms": r.kv_transfer_ms,
            "router_queue_ms": r.router_queue_ms,
            "preemptions": r.preemptions,
        }
        if done:
            assert r.first_token_ms is not None and r.last_token_ms is not None  # it emitted its tokens
            ttft = r.first_token_ms - r.arrival_ms
            e2e = r.last_token_ms - r.arrival_ms
            row.update(
                ttft_ms=ttft,
                ttst_ms=ttst_ms(r),
                e2e_latency_ms=e2e,
                itl_ms=(e2e - ttft) / (r.generated - 1) if r.generated > 1 else None,
            )
        rows.append(row)
    return rows
