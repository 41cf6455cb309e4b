"""What the planner sees of a running replay, and the fleet's lifecycle it drives.

Workers move ``starting`` (billed, not routable, for the engine's ``startup_time``) →
``active`` → ``draining`` (not routable; finishes what it holds) → removed. Every change is
recorded, so the report can integrate provisioned GPUs over time and plot the fleet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aisimulate.catalog import get_model
from aisimulate.perf.model import PassRecord
from aisimulate.planner.fpm import ForwardPassMetrics
from aisimulate.planner.policy import RoleCapability, RoleState, TrafficWindow
from aisimulate.replay.engine import Rank
from aisimulate.replay.metrics import Finished
from aisimulate.replay.request import Request
from aisimulate.replay.workers import Pool, ResolvedEngine, Worker


def capability(engine: ResolvedEngine, model: str) -> RoleCapability:
    """One engine's limits per DP rank, and a perf-model probe of its pass time."""
    spec, perf = engine.spec, engine.perf
    context = spec.max_model_len or get_model(model).max_context_tokens or 131072
    capacity = engine.num_gpu_blocks * spec.block_size

    def pass_time_ms(prefill_tokens: float, decode_requests: float, decode_kv: float) -> float:
        tokens = int(prefill_tokens)  # one prompt from scratch: causal pairs t(t+1)/2
        d, kv = int(decode_requests), int(decode_kv)
        pairs = tokens * (tokens + 1) / 2.0
        return perf.time_ms(tokens, int(tokens > 0), pairs, 0, d, kv, 1.0 + spec.nextn, kv, capacity)

    return RoleCapability(
        gpus_per_engine=spec.gpus_per_worker,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_num_seqs=spec.max_num_seqs,
        context_length=context,
        max_kv_tokens=capacity,
        accept_length=spec.mean_tokens_per_step,
        ranks_per_engine=spec.attention_dp,
        pass_time_ms=pass_time_ms,
    )


def fpm_snapshot(rank: Rank, queued_decode: Iterable[Request], seen: object) -> ForwardPassMetrics:
    """The rank's latest pass and its queues now; ``seen`` is the pass reported last time (a
    repeat is not fresh: the rank has been idle since). Preempted requests wait as decode work
    with their whole context, as in the reference."""
    prefill_n = prefill_tokens = decode_n = decode_kv = 0
    for r in rank.waiting:
        if r.preemptions:
            decode_n += 1
            decode_kv += r.seq_len
        else:
            prefill_n += 1
            prefill_tokens += r.prompt_len
    for r in (*rank.materialized, *queued_decode):
        decode_n += 1
        decode_kv += r.seq_len
    last = rank.last_pass
    record = last if last is not None else PassRecord(0, 0, 0, 0, 0.0)
    return ForwardPassMetrics(
        wall_time_ms=record.duration_ms,
        num_prefill_requests=record.prefill_requests,
        sum_prefill_tokens=record.prefill_tokens,
        num_decode_requests=record.decode_requests,
        sum_decode_kv_tokens=record.decode_context_tokens,
        num_queued_prefill=prefill_n,
        sum_queued_prefill_tokens=prefill_tokens,
        num_queued_decode=decode_n,
        sum_queued_decode_kv_tokens=decode_kv,
        fresh=last is not None and last is not seen,
    )


@dataclass
class Lifecycle:
    """Starting and draining workers per pool, and the record of every fleet change."""

    pools: list[Pool]
    starting: dict[int, tuple[Pool, Worker]] = field(default_factory=dict)  # id(worker) -> ...
    draining: dict[int, tuple[Pool, Worker]] = field(default_factory=dict)
    series: list[dict[str, float | int | str]] = field(default_factory=list)

    def counts(self, pool: Pool) -> tuple[int, int, int]:
        starting = sum(1 for p, _ in self.starting.values() if p is pool)
        draining = sum(1 for p, _ in self.draining.values() if p is pool)
        return len(pool.workers), starting, draining

    def record(self, pool: Pool, now_ms: float) -> None:
        """Append the pool's fleet if it changed since its previous row."""
        active, starting, draining = self.counts(pool)
        row: dict[str, float | int | str] = dict(
            time_ms=now_ms, role=pool.role, active=active, starting=starting, draining=draining
        )
        previous = next((old for old in reversed(self.series) if old["role"] == pool.role), None)
        if previous is None or any(previous[key] != row[key] for key in ("active", "starting", "draining")):
            self.series.append(row)

    def state(self, pool: Pool, fpm: list[ForwardPassMetrics]) -> RoleState:
        active, starting, draining = self.counts(pool)
        return RoleState(fpm=fpm, active=active, starting=starting, draining=draining)

    def provisioned_changes(self) -> tuple[tuple[float, str, int], ...]:
        """(time, billing role, workers provisioned after it): aggregated workers bill as
        decode, as in the reference."""
        return tuple(
            (
                float(row["time_ms"]),
                "prefill" if row["role"] == "prefill" else "decode",
                int(row["active"]) + int(row["starting"]) + int(row["draining"]),
            )
            for row in self.series
        )


def traffic_window(num_requests: int, finished: Finished, since: int) -> TrafficWindow:
    """The window of ``num_requests`` offered requests and the requests ``finished`` in it (those
    from index ``since`` on)."""
    return TrafficWindow(
        num_requests=num_requests,
        num_completed=len(finished) - since,
        sum_input_tokens=sum(finished.input_tokens[since:]),
        sum_output_tokens=sum(finished.output_tokens[since:]),
        sum_cached_tokens=sum(finished.first_reused_tokens[since:]),
    )
