"""The event loop: arrivals, worker passes and completions on one virtual millisecond clock.

At each instant the loop settles the state in a fixed order, as the reference replay does:
passes that end now publish their tokens and completions; requests that arrive now (or become
ready: a session's next turn, or a closed-loop slot freed) are routed and queued; then every
idle worker with work starts its next pass. A worker's attention-DP ranks step in lock-step:
a pass lasts as long as its slowest rank.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import ConfigError, InfeasibleError
from aisimulate.perf.memory import estimate_memory
from aisimulate.perf.model import PerfModel
from aisimulate.perf.providers import get_perf_model
from aisimulate.perf.shape import ParallelShape
from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_cache import unit_blocks
from aisimulate.replay.metrics import Collector
from aisimulate.replay.plan import SLA, DeploymentPlan, EngineSpec
from aisimulate.replay.report import Fleet, Report, request_records, summarize
from aisimulate.replay.request import Request
from aisimulate.replay.router import make_router
from aisimulate.replay.sglang import SglangRank
from aisimulate.workload.loader import Workload
from aisimulate.workload.request import RequestSpec, Session


@dataclass(frozen=True, kw_only=True)
class ResolvedEngine:
    """An engine spec with what the catalog and perf layer derive for it."""

    spec: EngineSpec
    backend: str
    perf: PerfModel
    num_gpu_blocks: int


def resolve_engine(
    plan: DeploymentPlan, spec: EngineSpec, *, perf: str, perf_table: str | Path | None, where: str
) -> ResolvedEngine:
    model = get_model(plan.model, where="deployment.model")
    system = get_system(plan.system, where="deployment.system")
    shape = ParallelShape(
        tp=spec.tp, pp=spec.pp, attention_dp=spec.attention_dp, moe_tp=spec.moe_tp, moe_ep=spec.moe_ep
    )
    memory = estimate_memory(
        model,
        system,
        shape,
        backend=plan.backend,
        gpu_memory_utilization=spec.gpu_memory_utilization,
        kv_cache_dtype=spec.kv_cache_dtype,
        block_size=spec.block_size,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_num_seqs=spec.max_num_seqs,
        max_model_len=spec.max_model_len,
    )
    blocks = spec.num_gpu_blocks
    if blocks is None:
        if not memory.feasible:
            raise InfeasibleError(f"{model.name} on {system.name}: {memory.reason}", where=where)
        blocks = memory.num_gpu_blocks
    provider = get_perf_model(
        perf,
        model=model,
        system=system,
        shape=shape,
        backend=plan.backend,
        kv_cache_dtype=spec.kv_cache_dtype,
        table_path=perf_table,
    )
    return ResolvedEngine(spec=spec, backend=plan.backend, perf=provider, num_gpu_blocks=blocks)


class Worker:
    """A replica: ``attention_dp`` ranks that pass in lock-step.

    A single-rank worker may run a decode-only *stretch*: many passes planned at once and
    committed when they end, or cut short (:meth:`cut`) when a request arrives that a later
    pass could admit.
    """

    def __init__(self, ranks: list[Rank], *, stretches: bool) -> None:
        self.ranks = ranks
        self.busy = False
        self.version = 0  # bumps whenever the pending pass end moves
        self._stepping: list[Rank] = []
        self._stretch: np.ndarray | None = None
        self._stretches = stretches and len(ranks) == 1

    def has_work(self) -> bool:
        return any(rank.has_work() for rank in self.ranks)

    def begin(self, now_ms: float, horizon_ms: float = float("inf"), until_ms: float = float("inf")) -> float:
        """Start the next pass (or stretch) at ``now_ms``; return when it ends."""
        self.busy = True
        self.version += 1
        if self._stretches:
            ends = self.ranks[0].plan_stretch(now_ms, horizon_ms, until_ms)
            if ends is not None:
                self._stretch = ends
                return float(ends[-1])
        self._stepping = [rank for rank in self.ranks if rank.has_work()]
        durations = [rank.begin_pass(now_ms) for rank in self._stepping]
        return now_ms + max(durations, default=0.0)

    def cut(self, now_ms: float) -> float | None:
        """A request arrived at ``now_ms``: keep only the stretch's passes that started before
        it. Returns the new end time, or None if nothing changed."""
        ends = self._stretch
        if ends is None or len(ends) == 1:
            return None
        keep = 1 + int(np.searchsorted(ends[:-1], now_ms, side="left"))
        if keep >= len(ends):
            return None
        self._stretch = ends[:keep]
        self.version += 1
        return float(ends[keep - 1])

    def end(self, end_ms: float) -> list[Request]:
        self.busy = False
        if self._stretch is not None:
            ends, self._stretch = self._stretch, None
            return self.ranks[0].commit_stretch(ends)
        finished: list[Request] = []
        for rank in self._stepping:
            finished.extend(rank.end_pass(end_ms))
        return finished


_PASS_END, _READY = 0, 1


class Simulation:
    def __init__(
        self,
        plan: DeploymentPlan,
        workload: Workload,
        *,
        engine: ResolvedEngine,
        seed: int,
        exact: bool,
        capture_timeline: bool,
        timeline_interval_ms: float,
        max_sim_time_ms: float | None,
    ) -> None:
        self.collector = Collector()
        rng = np.random.default_rng([seed, 0x7017E])
        self.router = make_router(plan.router, rng)
        spec = engine.spec
        self.engine = engine
        self.workers = [
            Worker(
                [
                    (SglangRank if engine.backend == "sglang" else Rank)(
                        spec,
                        engine.backend,
                        engine.perf,
                        engine.num_gpu_blocks,
                        self.collector,
                        exact=exact,
                        worker=w,
                        rank=d,
                        unit=unit_blocks(workload.hash_block_tokens(spec.block_size), spec.block_size),
                    )
                    for d in range(spec.attention_dp)
                ],
                # A load-aware router must see every pass's KV state, so it steps pass by pass.
                stretches=not exact and plan.router.mode in ("round_robin", "random"),
            )
            for w in range(spec.replicas)
        ]
        self.worker_of = {id(rank): worker for worker in self.workers for rank in worker.ranks}
        self.ranks = [rank for worker in self.workers for rank in worker.ranks]
        self.block_size = spec.block_size
        self.max_model_len = spec.max_model_len
        self.sessions: Iterator[Session] = workload.sessions(spec.block_size, seed)
        self.closed = workload.mode == "closed"
        self.concurrency = workload.concurrency if self.closed else None
        self.max_sim_time_ms = max_sim_time_ms
        self.heap: list[tuple[float, int, int, Any]] = []
        self._seq = count()
        self.in_flight = 0
        self.num_requests = 0
        self.ready: deque[RequestSpec] = deque()
        self.next_turn: dict[int, tuple[Session, int]] = {}
        self._pending_session: Session | None = None
        self.timeline: list[dict[str, Any]] | None = [] if capture_timeline else None
        self.timeline_interval_ms = timeline_interval_ms
        self._next_sample_ms = 0.0
        self._tokens_at_sample = 0

    # ---- arrivals ------------------------------------------------------------------------
    def _next_session(self) -> Session | None:
        if self._pending_session is None:
            self._pending_session = next(self.sessions, None)
        return self._pending_session

    def _take_session(self) -> Session:
        session = self._next_session()
        assert session is not None
        self._pending_session = None
        return session

    def _arrive(self, spec: RequestSpec, now: float, session: Session) -> None:
        self.num_requests += 1
        self.in_flight += 1
        if spec.turn + 1 < len(session.turns):
            self.next_turn[spec.request_id] = (session, spec.turn + 1)
        r = Request.from_spec(spec, now, self.block_size, max_model_len=self.max_model_len)
        rank = self.ranks[self.router.route(r, self.ranks)]
        was_idle_queue = not rank.waiting
        if not rank.enqueue(r):
            self.collector.reject(r)
            self._complete(r, now)
        elif was_idle_queue:
            worker = self.worker_of[id(rank)]
            moved = worker.cut(now)
            if moved is not None:
                self._push(moved, _PASS_END, (worker, worker.version))

    def _complete(self, r: Request, now: float) -> None:
        self.in_flight -= 1
        follow = self.next_turn.pop(r.rid, None)
        if follow is None:
            return
        session, turn = follow
        spec = session.turns[turn]
        self._push(now + spec.delay_ms, _READY, (spec, session))

    def _push(self, at: float, kind: int, payload: Any) -> None:
        heapq.heappush(self.heap, (at, kind, next(self._seq), payload))

    def _release_arrivals(self, now: float) -> None:
        """Open loop: sessions whose first turn is due. Closed loop: fill free slots."""
        if not self.closed:
            while (session := self._next_session()) is not None and session.arrival_ms <= now:
                self._take_session()
                self._arrive(session.turns[0], now, session)
            return
        while self.in_flight < self.concurrency:  # type: ignore[operator]
            if self.ready:
                spec, session = self.ready.popleft()
                self._arrive(spec, now, session)
            elif self._next_session() is not None:
                session = self._take_session()
                self._arrive(session.turns[0], now, session)
            else:
                break

    # ---- the loop ------------------------------------------------------------------------
    def _next_time(self) -> float | None:
        candidates = []
        if self.heap:
            candidates.append(self.heap[0][0])
        if not self.closed and (session := self._next_session()) is not None:
            candidates.append(session.arrival_ms)
        return min(candidates) if candidates else None

    def run(self) -> None:
        if self.closed:
            self._drain(0.0)
        while (now := self._next_time()) is not None:
            if self.max_sim_time_ms is not None and now > self.max_sim_time_ms:
                break
            self._drain(now)

    def _drain(self, now: float) -> None:
        heap = self.heap
        while True:
            while heap and heap[0][0] <= now and heap[0][1] == _PASS_END:
                _, _, _, (worker, version) = heapq.heappop(heap)
                if version != worker.version:
                    continue  # a stretch that was cut short
                for r in worker.end(now):
                    self._complete(r, now)
            while heap and heap[0][0] <= now and heap[0][1] == _READY:
                _, _, _, (spec, session) = heapq.heappop(heap)
                if self.closed:
                    self.ready.append((spec, session))
                else:
                    self._arrive(spec, now, session)
            self._release_arrivals(now)
            if self.timeline is not None:
                self._sample(now)
            started_instant = False
            horizon = until = float("inf")
            if self.timeline is not None:
                until = self._next_sample_ms
            if not self.closed and (upcoming := self._next_session()) is not None:
                horizon = upcoming.arrival_ms
            for worker in self.workers:
                if not worker.busy and worker.has_work():
                    end = worker.begin(now, horizon, until)
                    if end <= now and not any(rank.num_running for rank in worker.ranks):
                        raise AssertionError("a worker with waiting requests could schedule nothing")
                    self._push(end, _PASS_END, (worker, worker.version))
                    started_instant |= end <= now
            if not started_instant and not (heap and heap[0][0] <= now):
                return

    def _sample(self, now: float) -> None:
        assert self.timeline is not None
        while now >= self._next_sample_ms:
            tokens = self.collector.emitted_tokens
            interval_s = self.timeline_interval_ms / 1000.0
            active = sum(rank.pool.num_active for rank in self.ranks)
            total = sum(rank.pool.num_blocks for rank in self.ranks)
            self.timeline.append(
                {
                    "time_ms": self._next_sample_ms,
                    "replicas": len(self.workers),
                    "running": sum(rank.num_running for rank in self.ranks),
                    "waiting": sum(len(rank.waiting) for rank in self.ranks),
                    "kv_usage_ratio": active / total if total else 0.0,
                    "output_tokens_per_s": (tokens - self._tokens_at_sample) / interval_s,
                }
            )
            self._tokens_at_sample = tokens
            self._next_sample_ms += self.timeline_interval_ms


def simulate(
    plan: DeploymentPlan,
    workload: Workload,
    *,
    sla: SLA | None = None,
    perf: str = "analytic",
    perf_table: str | Path | None = None,
    seed: int = 0,
    exact: bool = False,
    capture_requests: bool = False,
    capture_timeline: bool = False,
    timeline_interval_ms: float = 1000.0,
    max_sim_time_ms: float | None = None,
) -> Report:
    """Replay ``workload`` on ``plan``; deterministic for a given ``seed``."""
    if plan.mode != "agg":
        raise ConfigError(f"deployment mode {plan.mode!r} is not supported yet", where="deployment.mode")
    if timeline_interval_ms <= 0:
        raise ConfigError("timeline_interval_ms must be > 0", where="timeline_interval_ms")
    engine = resolve_engine(plan, plan.agg, perf=perf, perf_table=perf_table, where="deployment.agg")
    started = time.perf_counter()
    collecting = gc.isenabled()
    gc.disable()  # a replay allocates many long-lived objects and no reference cycles
    try:
        sim = Simulation(
            plan,
            workload,
            engine=engine,
            seed=seed,
            exact=exact,
            capture_timeline=capture_timeline,
            timeline_interval_ms=timeline_interval_ms,
            max_sim_time_ms=max_sim_time_ms,
        )
        sim.run()
    finally:
        if collecting:
            gc.enable()
    wall_ms = (time.perf_counter() - started) * 1000.0
    spec = plan.agg
    ranks = sim.ranks
    summary = summarize(
        sim.collector,
        num_requests=sim.num_requests,
        fleet=Fleet(
            prefill_workers=0,
            decode_workers=spec.replicas,
            prefill_gpus_per_worker=0,
            decode_gpus_per_worker=spec.gpus_per_worker,
        ),
        sla=sla,
        perf_model=engine.perf.name,
        preemptions=sum(rank.num_preemptions for rank in ranks),
        max_kv_usage_ratio=max(rank.max_active_blocks / rank.pool.num_blocks for rank in ranks),
        wall_time_ms=wall_ms,
    )
    return Report(
        summary=summary,
        perf_model=engine.perf.name,
        requests=request_records(sim.collector) if capture_requests else None,
        timeline=sim.timeline,
        config={"plan": plan.model_dump(), "seed": seed, "perf": perf, "exact": exact},
    )
