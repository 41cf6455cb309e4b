"""The event loop: arrivals, worker passes and completions on one virtual millisecond clock.

At each instant the loop settles the state in one declared order (:data:`SETTLE_ORDER`), as the
reference replay does: passes that end now publish their tokens and completions; KV that arrives
now joins its decode worker; requests that arrive now (or become ready: a session's next turn, or
a closed-loop slot freed) are routed and queued; workers that finished starting serve; the
planner ticks. Only then does every idle worker with work start its next pass. A worker's
attention-DP ranks step in lock-step: a pass lasts as long as its slowest rank.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections import deque
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np

from aisimulate.catalog.backends import backend_profile
from aisimulate.errors import ConfigError
from aisimulate.planner.policy import Planner
from aisimulate.replay.autoscale import Lifecycle, capability, fpm_snapshot, traffic_window
from aisimulate.replay.destination import DESTINATION
from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_cache import unit_blocks
from aisimulate.replay.kv_events import Clock
from aisimulate.replay.metrics import Collector
from aisimulate.replay.offload import SharedLink
from aisimulate.replay.plan import SLA, DeploymentPlan
from aisimulate.replay.report import Fleet, Report, request_records, summarize
from aisimulate.replay.request import Request
from aisimulate.replay.router import HeldRequests
from aisimulate.replay.transfer import KvSenders, kv_transfer
from aisimulate.replay.workers import (
    Pool,
    ResolvedEngine,
    Worker,
    build_pool,
    resolve_engine,
    resolve_frontend_latency_ms,
)
from aisimulate.workload.loader import Workload
from aisimulate.workload.request import RequestSpec, Session

# How an instant settles, in order: each phase is (name, whether it settles heap events). An
# event phase handles the heap's events of its kind, ``_on_<name>(payload, now)``; a step phase
# runs ``_settle_<name>(now)`` every time the instant settles. An event's kind is its phase's
# position, so the heap pops same-instant events in this order too; an event that a later phase
# creates for an earlier one at the same instant sends the settling back to that phase.
SETTLE_ORDER: tuple[tuple[str, bool], ...] = (
    ("pass_end", True),  # (worker, version): a pass or stretch ended; its tokens and completions
    ("held", False),  # admission control lets held requests through while capacity allows
    ("transfer", True),  # (request, prefill copy, source rank, decode rank): prompt KV arrived
    ("link", True),  # (link, version, rank): a host-offload copy finished
    ("ready", True),  # (turn, session): a session's next turn is due
    ("arrivals", False),  # open loop: sessions due now; closed loop: fill free slots
    ("frontend", True),  # request: it reaches the entry router after the frontend latency
    ("started", True),  # (pool, worker): a new worker finished starting
    ("tick", True),  # None: the planner's tick
)
_KIND = {name: kind for kind, (name, _) in enumerate(SETTLE_ORDER)}
_PASS_END, _TRANSFER, _LINK, _READY = _KIND["pass_end"], _KIND["transfer"], _KIND["link"], _KIND["ready"]
_FRONTEND, _STARTED, _TICK = _KIND["frontend"], _KIND["started"], _KIND["tick"]


def settle_phases(cls: type[Simulation]) -> tuple[tuple[int, bool, Callable[..., None]], ...]:
    """(kind, settles events, handler) of each phase of :data:`SETTLE_ORDER`. The handlers are
    the class's plain functions: bound methods kept on a simulation would make it a reference
    cycle."""
    return tuple(
        (kind, event, getattr(cls, f"_on_{name}" if event else f"_settle_{name}"))
        for kind, (name, event) in enumerate(SETTLE_ORDER)
    )


class Simulation:
    def __init__(
        self,
        plan: DeploymentPlan,
        workload: Workload,
        *,
        engines: dict[str, ResolvedEngine],
        seed: int,
        exact: bool,
        capture_timeline: bool,
        timeline_interval_ms: float,
        max_sim_time_ms: float | None,
        capture_requests: bool = False,
    ) -> None:
        self.collector = Collector(keep_requests=capture_requests)
        # Prefill workers emit no visible tokens: their first token is the decode worker's.
        self.hidden = Collector(on_admission=self.collector.admission_counted, keep_finished=False)
        rng = np.random.default_rng([seed, 0x7017E])
        block_size = next(iter(engines.values())).spec.block_size
        unit = unit_blocks(workload.hash_block_tokens(block_size), block_size)
        self.clock = Clock()  # read by routers that see KV events late
        self.pools = [
            build_pool(
                role,
                engines[role],
                router,
                self.hidden if role == "prefill" else self.collector,
                unit=unit,
                exact=exact,
                rng=rng,
                clock=self.clock,
            )
            for role, _, router in plan.pools()
        ]
        self.entry = self.pools[0]
        self.decode_pool = self.pools[-1] if plan.mode == "disagg" else None
        # A decode worker whose engine balances its attention-DP ranks takes each hand-off on
        # the rank holding the fewest of its requests (see ``BackendProfile.balances_attention_dp``).
        self.balanced_ranks = (
            self.decode_pool is not None
            and backend_profile(plan.backend).balances_attention_dp
            and self.decode_pool.engine.spec.attention_dp > 1
        )
        self.rank_load: dict[int, int] = {}  # id(decode rank) -> its requests not yet completed
        self.load_on: dict[int, int] = {}  # request id -> id(the decode rank it was counted on)
        self.senders = KvSenders(kv_transfer(plan))
        self.destination_missing = plan.kv_transfer_timing == "destination_missing"
        self.frontend_ms = resolve_frontend_latency_ms(plan)
        self.held = HeldRequests(self.entry.router.queue_policy)
        self.workers = [worker for pool in self.pools for worker in pool.workers]
        self.ranks = [rank for pool in self.pools for rank in pool.ranks]
        self.worker_of = {k: v for pool in self.pools for k, v in pool.worker_of.items()}
        self.block_size = block_size
        self.sessions: Iterator[Session] = workload.sessions(block_size, seed)
        self.closed = workload.mode == "closed"
        self.concurrency = workload.concurrency if self.closed else None
        self.max_sim_time_ms = max_sim_time_ms
        self.heap: list[tuple[float, int, int, Any]] = []
        self._seq = count()
        self.in_flight = 0
        self.num_requests = 0
        self.ready: deque[tuple[RequestSpec, Session]] = deque()
        self.next_turn: dict[int, tuple[Session, int]] = {}
        self._pending_session: Session | None = None
        self.timeline: list[dict[str, Any]] | None = [] if capture_timeline else None
        self.timeline_interval_ms = timeline_interval_ms
        self._next_sample_ms = 0.0
        self._tokens_at_sample = 0
        self.planner: Planner | None = None
        self.lifecycle = Lifecycle(pools=self.pools)
        self._phases = settle_phases(type(self))
        if plan.planner is not None:
            self._start_planner(plan, engines)

    # ---- the planner ---------------------------------------------------------------------
    def _start_planner(self, plan: DeploymentPlan, engines: dict[str, ResolvedEngine]) -> None:
        assert plan.planner is not None
        self.planner = Planner(
            plan.planner,
            {pool.role: capability(engines[pool.role], plan.model) for pool in self.pools},
            initial={pool.role: len(pool.workers) for pool in self.pools},
        )
        self._seen: dict[int, object] = {}  # rank id -> the pass the planner saw last
        self._offered_at_tick = 0
        self._finished_at_tick = 0
        for pool in self.pools:
            self.lifecycle.record(pool, 0.0)
        self._push(self.planner.first_tick_ms(), _TICK, None)

    def _tick(self, now: float) -> None:
        planner = self.planner
        assert planner is not None
        roles = {}
        for pool in self.pools:
            fpm = []
            for rank in pool.ranks:
                queued = (r for r, _, _ in rank.pending_destinations)
                fpm.append(fpm_snapshot(rank, queued, self._seen.get(id(rank))))
                self._seen[id(rank)] = rank.last_pass
            roles[pool.role] = self.lifecycle.state(pool, fpm)
        finished = self.collector.done
        window = traffic_window(self.num_requests - self._offered_at_tick, finished, self._finished_at_tick)
        self._offered_at_tick, self._finished_at_tick = self.num_requests, len(finished)
        decision = planner.tick(now, roles, window)
        for pool in self.pools:
            target = decision.targets.get(pool.role)
            if target is not None:
                self._scale(pool, target, now)
        # Done when nothing can arrive any more: no session, no request in flight, and no
        # session's next turn waiting out its delay in the heap.
        done = (
            self._next_session() is None
            and not self.in_flight
            and not self.ready
            and all(kind in (_STARTED, _TICK) for _, kind, _, _ in self.heap)
        )
        if decision.next_tick_ms is not None and not done:
            self._push(decision.next_tick_ms, _TICK, None)

    def _scale(self, pool: Pool, target: int, now: float) -> None:
        """Start or remove workers until ``target`` are serving or on their way."""
        lifecycle = self.lifecycle
        active, starting, _ = lifecycle.counts(pool)
        startup_ms = (pool.engine.spec.startup_time or 0.0) * 1000.0
        for _ in range(target - active - starting):
            worker = pool.new_worker()
            self.ranks.extend(worker.ranks)
            self.worker_of.update({id(rank): worker for rank in worker.ranks})
            if startup_ms > 0:
                lifecycle.starting[id(worker)] = (pool, worker)
                self._push(now + startup_ms, _STARTED, (pool, worker))
            else:
                self._activate(pool, worker, now)
        excess = active + starting - target
        # Capacity still starting goes first (newest first): it serves nobody yet.
        for key in reversed(list(lifecycle.starting)):
            if excess <= 0:
                break
            if lifecycle.starting[key][0] is pool:
                del lifecycle.starting[key]
                excess -= 1
        while excess > 0 and pool.workers:
            # The least loaded worker drains fastest; among equals the newest goes.
            worker = min(
                reversed(pool.workers),
                key=lambda w: sum(rank.num_running + len(rank.waiting) for rank in w.ranks),
            )
            pool.deactivate(worker)
            lifecycle.draining[id(worker)] = (pool, worker)
            excess -= 1
            self._retire_if_idle(worker, now)
        lifecycle.record(pool, now)

    def _activate(self, pool: Pool, worker: Worker, now: float) -> None:
        pool.activate(worker)
        self.workers.append(worker)
        if pool is self.entry and self.held:
            self._settle_held(now)

    def _started(self, pool: Pool, worker: Worker, now: float) -> None:
        if self.lifecycle.starting.pop(id(worker), None) is None:
            return  # cancelled while starting
        self._activate(pool, worker, now)
        self.lifecycle.record(pool, now)

    def _retire_if_idle(self, worker: Worker, now: float) -> None:
        """A draining worker leaves once it holds no work (nor KV on its way to it)."""
        if worker.busy or worker.has_work() or any(rank.pending_destinations for rank in worker.ranks):
            return
        pool, _ = self.lifecycle.draining.pop(id(worker))
        self.workers.remove(worker)
        self.lifecycle.record(pool, now)

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
        pool = self.entry
        r = Request.from_spec(spec, now, self.block_size, max_model_len=pool.engine.spec.max_model_len)
        if pool.role == "prefill":
            r.max_output = 1  # the prefill copy: its one token is produced with the prefill
        if self.frontend_ms:
            self._push(now + self.frontend_ms, _FRONTEND, r)
        else:
            self._enter(r, now)

    def _enter(self, r: Request, now: float) -> None:
        """A request reaches the entry router: held by admission control, or routed."""
        if self.held or self.entry.router.should_hold(self.entry.ranks):
            self.held.push(r)
            return
        self._dispatch(r, now)

    def _settle_held(self, now: float) -> None:
        """Admission control: route held requests while the router lets them through."""
        pool = self.entry
        while self.held and not pool.router.should_hold(pool.ranks):
            r = self.held.pop()
            r.router_queue_ms = now - r.arrival_ms - self.frontend_ms
            self.collector.held(r.router_queue_ms)
            self._dispatch(r, now)

    def _dispatch(self, r: Request, now: float) -> None:
        pool = self.entry
        rank = pool.ranks[pool.router.route(r, pool.ranks)]
        was_idle_queue = not rank.waiting
        if not rank.enqueue(r, now):
            pool.router.release(r)
            self.collector.reject(r)
            self._complete(r, now)
        elif was_idle_queue:
            self._wake(rank, now, queued=True)

    def _wake(self, rank: Rank, now: float, *, queued: bool = False) -> None:
        """New work for a rank: its worker's planned passes stop at the next boundary, where it
        can join (``queued``: a waiting request, which asynchronous scheduling admits a pass
        later)."""
        worker = self.worker_of[id(rank)]
        moved = worker.cut(now, lag=queued and rank.async_admission)
        if moved is not None:
            self._push(moved, _PASS_END, (worker, worker.version))

    def _complete(self, r: Request, now: float) -> None:
        (self.decode_pool or self.entry).router.release(r)
        if self.balanced_ranks and (counted := self.load_on.pop(r.rid, None)) is not None:
            self.rank_load[counted] -= 1
        self.in_flight -= 1
        follow = self.next_turn.pop(r.rid, None)
        if follow is None:
            return
        session, turn = follow
        spec = session.turns[turn]
        self._push(now + spec.delay_ms, _READY, (spec, session))

    # ---- disaggregation ------------------------------------------------------------------
    def _handoff(self, prefilled: Request, source: Rank, now: float) -> None:
        """A prompt finished on a prefill worker: pick its decode worker and reserve KV there."""
        self.entry.router.release(prefilled)
        pool = self.decode_pool
        assert pool is not None
        max_len = pool.engine.spec.max_model_len
        r = Request.from_spec(
            prefilled.spec,
            prefilled.arrival_ms,
            self.block_size,
            max_model_len=max_len,
            prompt_keys=prefilled.prompt_keys,
        )
        r.first_admit_ms = prefilled.first_admit_ms
        r.first_reused_tokens = prefilled.first_reused_tokens
        r.max_reused_tokens = prefilled.max_reused_tokens
        r.prefill_worker = prefilled.worker
        rank = pool.ranks[pool.router.route(r, pool.ranks)]
        if self.balanced_ranks:
            rank = self._balance(rank, r)
        r.worker, r.rank = rank.worker, rank.rank
        if not rank.policy.on_enqueue(rank, r):
            source.release_sent(prefilled)
            self.collector.reject(r)
            self._complete(r, now)
            return
        queue = rank.pending_destinations
        queue.append((r, prefilled, source))
        if len(queue) == 1:
            self._reserve(rank, now)

    def _balance(self, routed: Rank, r: Request) -> Rank:
        """The rank of ``routed``'s worker that takes r: the one holding the fewest requests
        (running, queued or on their way), the lowest index among equals. The router chose the
        worker; the worker's engine chose the rank."""
        load = self.rank_load
        rank = min(self.worker_of[id(routed)].ranks, key=lambda k: (load.get(id(k), 0), k.rank))
        load[id(rank)] = load.get(id(rank), 0) + 1
        self.load_on[r.rid] = id(rank)
        return rank

    def _reserve(self, rank: Rank, now: float) -> None:
        """Start the transfers of queued prompts, in order, while the decode rank has room."""
        queue = rank.pending_destinations
        if not queue:
            return
        if DESTINATION.slot_bound(rank):
            # No slot: the head waits for a completion or a preemption (a pass end), whatever
            # blocks are free; nothing to price for it now (nor to wake the rank for).
            return
        # Blocks are taken at each pass's start: planned passes that started before now took
        # blocks not booked yet, which the reservation must leave room for. The blocks of all
        # its priced, unbooked passes bound them: a reservation that fits next to those fits
        # next to the started ones (and leaves the rank's planned passes their blocks); only
        # one that does not is tried again with the exact count.
        worker = self.worker_of[id(rank)]
        ahead = committed = worker.ahead_blocks(rank)
        exact = not ahead
        reserved = False
        while queue:
            r, prefilled, source = queue[0]
            missing = DESTINATION.reserve(rank, r, committed)
            if missing is None:
                if exact:
                    break
                committed, exact = worker.unbooked_blocks(rank, now), True
                continue
            queue.popleft()
            reserved = True
            tokens = r.prompt_len
            if self.destination_missing:
                tokens = min(missing * self.block_size, tokens)
            ms = self.senders.ms(now, tokens * self.pools[0].engine.kv_bytes_per_token_per_gpu, id(source))
            r.kv_transfer_ms = ms
            self.collector.transfer(ms)
            if ms > 0:
                self._push(now + ms, _TRANSFER, (r, prefilled, source, rank))
            else:
                self._arrive_decode(r, prefilled, source, rank, now)
        if reserved and (moved := worker.keep_room(rank, now, ahead)) is not None:
            self._push(moved, _PASS_END, (worker, worker.version))
        if queue and rank.materialized:
            # A hand-off waiting for KV lets arrived prompts go ahead of the rank's queue.
            self._wake(rank, now)

    def _arrive_decode(self, r: Request, prefilled: Request, source: Rank, rank: Rank, now: float) -> None:
        source.release_sent(prefilled)
        was_idle = not rank.materialized
        DESTINATION.activate(rank, r)
        if was_idle and not DESTINATION.slot_bound(rank):
            self._wake(rank, now)

    # ---- the loop ------------------------------------------------------------------------
    def _push(self, at: float, kind: int, payload: Any) -> None:
        heapq.heappush(self.heap, (at, kind, next(self._seq), payload))

    def _settle_arrivals(self, now: float) -> None:
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
        heap = self.heap
        # A worker's event that new work moved earlier is no instant of its own (a timeline
        # sample there would read a moment stepping never stops at).
        while heap and heap[0][1] == _PASS_END and heap[0][3][1] != heap[0][3][0].version:
            heapq.heappop(heap)
        candidates = []
        if heap:
            candidates.append(heap[0][0])
        if not self.closed and (session := self._next_session()) is not None:
            candidates.append(session.arrival_ms)
        return min(candidates) if candidates else None

    def run(self) -> None:
        if self.closed:
            self._drain(0.0)
        while (now := self._next_time()) is not None:
            if self.max_sim_time_ms is not None and now > self.max_sim_time_ms:
                return
            self._drain(now)
        if self.in_flight:
            raise AssertionError(f"replay deadlocked with {self.in_flight} requests in flight")

    def _drain(self, now: float) -> None:
        self.clock.now_ms = now
        heap = self.heap
        phases = self._phases
        last = len(phases)
        stalled: set[int] = set()
        while True:
            i = 0
            while i < last:
                kind, event, handle = phases[i]
                if event:
                    while heap and heap[0][0] <= now and heap[0][1] == kind:
                        handle(self, heapq.heappop(heap)[3], now)
                else:
                    handle(self, now)
                i += 1
                if heap and heap[0][0] <= now and heap[0][1] < i:
                    i = heap[0][1]  # an earlier phase's event, created at this instant
            if self.timeline is not None:
                self._sample(now)
            started_instant = False
            until = self._next_sample_ms if self.timeline is not None else float("inf")
            for worker in self.workers:
                if worker.busy or not worker.has_work() or (stalled and id(worker) in stalled):
                    continue
                end = worker.begin(now, until)
                for rank in worker.ranks:  # copies the pass asked for (host offload)
                    for link in rank.link_work(now):
                        self._schedule_link(link, rank)
                if end <= now and not any(rank.num_running for rank in worker.ranks):
                    worker.busy = False
                    if any(rank.preempted_in_pass for rank in worker.ranks):
                        started_instant = True  # the next pass, at once, may admit what it freed
                    else:
                        # Nothing fits until something elsewhere frees KV (a prefill worker
                        # holding prompts not yet sent): idle until the next event.
                        stalled.add(id(worker))
                    continue
                self._push(end, _PASS_END, (worker, worker.version))
                started_instant |= end <= now
            if not started_instant and not (heap and heap[0][0] <= now):
                return

    # ---- the phases of an instant (SETTLE_ORDER) ------------------------------------------
    def _on_pass_end(self, payload: tuple[Worker, int], now: float) -> None:
        worker, version = payload
        if version != worker.version:
            return  # a stretch that was cut short
        for r in worker.end(now):
            if worker.ranks[0].role == "prefill":
                self._handoff(r, self._rank_of(worker, r), now)
            else:
                self._complete(r, now)
        if worker.ranks[0].role == "decode":
            for rank in worker.ranks:
                if rank.pending_destinations:
                    self._reserve(rank, now)
        if self.lifecycle.draining and id(worker) in self.lifecycle.draining:
            self._retire_if_idle(worker, now)

    def _on_transfer(self, payload: tuple[Request, Request, Rank, Rank], now: float) -> None:
        self._arrive_decode(*payload, now)

    def _on_link(self, payload: tuple[SharedLink, int, Rank], now: float) -> None:
        link, version, rank = payload
        if version == link.version:
            self._link_done(link, rank, now)

    def _on_ready(self, payload: tuple[RequestSpec, Session], now: float) -> None:
        if self.closed:
            self.ready.append(payload)
        else:
            self._arrive(payload[0], now, payload[1])

    def _on_frontend(self, r: Request, now: float) -> None:
        self._enter(r, now)

    def _on_started(self, payload: tuple[Pool, Worker], now: float) -> None:
        self._started(*payload, now)

    def _on_tick(self, _: None, now: float) -> None:
        self._tick(now)

    # ---- host offload --------------------------------------------------------------------
    def _schedule_link(self, link: SharedLink, rank: Rank) -> None:
        at = link.next_completion()
        if at is not None:
            self._push(at, _LINK, (link, link.version, rank))

    def _link_done(self, link: SharedLink, rank: Rank, now: float) -> None:
        tiers = rank.tiers
        assert tiers is not None
        for payload in link.complete(now):
            started, onboarded = tiers.arrived(payload, now)
            for other in started:
                self._schedule_link(other, rank)
            if onboarded is not None:
                _, r, keys = onboarded
                # Blocks planned passes took but have not booked yet are not free.
                self._wake(rank, now)
                worker = self.worker_of[id(rank)]
                room = rank.pool.available() - worker.unbooked_blocks(rank, now)
                was_idle = not rank.waiting
                rank.finish_onboard(r, keys, now, room)
                if was_idle:
                    self._wake(rank, now)
        self._schedule_link(link, rank)

    @staticmethod
    def _rank_of(worker: Worker, r: Request) -> Rank:
        return worker.ranks[r.rank]

    def _sample(self, now: float) -> None:
        assert self.timeline is not None
        if now >= self._next_sample_ms:
            for worker in self.workers:
                worker.book_ended(now)
        while now >= self._next_sample_ms:
            tokens = self.collector.emitted_tokens
            interval_s = self.timeline_interval_ms / 1000.0
            ranks = [rank for worker in self.workers for rank in worker.ranks]
            # A started pass has taken its blocks, booked or not (stepping takes them at its start).
            active = sum(
                rank.pool.num_active + worker.unbooked_blocks(rank, now)
                for worker in self.workers
                for rank in worker.ranks
            )
            total = sum(rank.pool.num_blocks for rank in ranks)
            self.timeline.append(
                {
                    "time_ms": self._next_sample_ms,
                    "replicas": len(self.workers),
                    "running": sum(rank.num_running for rank in ranks),
                    "waiting": sum(len(rank.waiting) for rank in ranks),
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
    if timeline_interval_ms <= 0:
        raise ConfigError("timeline_interval_ms must be > 0", where="timeline_interval_ms")
    # The report's plan says the frontend latency the replay ran with.
    plan = plan.model_copy(update={"frontend_latency_ms": resolve_frontend_latency_ms(plan)})
    engines = {
        role: resolve_engine(
            plan, spec, perf=perf, perf_table=perf_table, where=f"deployment.{role}", role=role
        )
        for role, spec, _ in plan.pools()
    }
    started = time.perf_counter()
    collecting = gc.isenabled()
    # A replay allocates many objects and no reference cycles: no collection while it runs, and
    # none walking its objects after it either, since they are freed as soon as it returns.
    gc.disable()
    try:
        sim = Simulation(
            plan,
            workload,
            engines=engines,
            seed=seed,
            exact=exact,
            capture_timeline=capture_timeline,
            timeline_interval_ms=timeline_interval_ms,
            max_sim_time_ms=max_sim_time_ms,
            capture_requests=capture_requests,
        )
        sim.run()
        wall_ms = (time.perf_counter() - started) * 1000.0
        return _report(
            sim,
            engines,
            sla=sla,
            wall_ms=wall_ms,
            capture_requests=capture_requests,
            config={"plan": plan.model_dump(), "seed": seed, "perf": perf, "exact": exact},
        )
    finally:
        if collecting:
            gc.enable()


def _report(
    sim: Simulation,
    engines: dict[str, ResolvedEngine],
    *,
    sla: SLA | None,
    wall_ms: float,
    capture_requests: bool,
    config: dict[str, Any],
) -> Report:
    ranks = sim.ranks
    prefill = engines.get("prefill")
    decode = engines.get("decode") or engines["agg"]
    perf_name = decode.perf.name
    summary = summarize(
        sim.collector,
        num_requests=sim.num_requests,
        fleet=Fleet(
            prefill_workers=prefill.spec.replicas if prefill else 0,
            decode_workers=decode.spec.replicas,
            prefill_gpus_per_worker=prefill.spec.gpus_per_worker if prefill else 0,
            decode_gpus_per_worker=decode.spec.gpus_per_worker,
            changes=sim.lifecycle.provisioned_changes(),
        ),
        sla=sla,
        perf_model=perf_name,
        preemptions=sum(rank.num_preemptions for rank in ranks),
        max_kv_usage_ratio=max(rank.max_active_blocks / rank.pool.num_blocks for rank in ranks),
        wall_time_ms=wall_ms,
    )
    planner = sim.planner
    if planner is not None:
        summary.update(
            planner_total_ticks=planner.stats.ticks,
            planner_scale_ups=planner.stats.scale_ups,
            planner_scale_downs=planner.stats.scale_downs,
        )
    return Report(
        summary=summary,
        perf_model=perf_name,
        requests=request_records(sim.collector) if capture_requests else None,
        timeline=sim.timeline,
        replicas=sim.lifecycle.series if planner is not None else None,
        planner_events=planner.stats.events if planner is not None else None,
        config=config,
    )
