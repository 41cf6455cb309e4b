"""Building the fleet: engines resolved against the catalog, workers, and pools of workers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.errors import InfeasibleError
from aisimulate.perf.aic import AicPerfModel
from aisimulate.perf.calibration import e2e_frontend_latency_ms
from aisimulate.perf.memory import estimate_memory
from aisimulate.perf.model import PerfModel
from aisimulate.perf.providers import get_perf_model
from aisimulate.perf.shape import ParallelShape
from aisimulate.replay.destination import DESTINATION
from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_cache import BlockPool
from aisimulate.replay.kv_events import Clock
from aisimulate.replay.lockstep import Window, next_run
from aisimulate.replay.metrics import Collector
from aisimulate.replay.offload import HostTiers
from aisimulate.replay.plan import DeploymentPlan, EngineSpec, RouterSpec
from aisimulate.replay.request import Request
from aisimulate.replay.router import Router, make_router
from aisimulate.replay.sglang import SglangRank
from aisimulate.replay.sglang_graphs import GraphedMlaPrefill, graphed_mla_prefill
from aisimulate.replay.stretch import STRETCHES, PlannedRun

# The rank that runs each pass shape a backend profile names.
RANK_CLASSES: dict[str, type[Rank]] = {"mixed": Rank, "extend_or_decode": SglangRank}


@dataclass(frozen=True, kw_only=True)
class ResolvedEngine:
    """An engine spec with what the catalog and perf layer derive for it."""

    spec: EngineSpec
    backend: str
    perf: PerfModel
    num_gpu_blocks: int
    kv_bytes_per_token_per_gpu: float
    async_scheduling: bool = False
    eager_pass_floor_ms: float = 0.0  # see Rank.eager_pass_floor_ms
    graphed_prefill: GraphedMlaPrefill | None = None  # see SglangRank.graphed_prefill
    # Passes a first token reaches the client late under an aggregated worker's overlap scheduler
    # (BackendProfile.overlap_first_token_lag_passes); None: no overlap scheduler replayed.
    overlap_lag_passes: float | None = None


def resolve_frontend_latency_ms(plan: DeploymentPlan) -> float:
    """The plan's frontend latency, or where it sets none, its backend's value fitted to measured
    serving runs: every replay and search candidate then carries the time real requests spend
    outside the engine, as the fidelity benchmark's replays do."""
    if plan.frontend_latency_ms is not None:
        return plan.frontend_latency_ms
    return e2e_frontend_latency_ms(plan.backend)


def resolve_engine(
    plan: DeploymentPlan,
    spec: EngineSpec,
    *,
    perf: str,
    perf_table: str | Path | None,
    where: str,
    role: str = "agg",
) -> ResolvedEngine:
    model = get_model(plan.model, where="deployment.model")
    if spec.moe_expert_slots is not None:
        model = model.with_expert_slots(spec.moe_expert_slots, where=f"{where}.moe_expert_slots")
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
        nextn=spec.nextn,
        enable_prefix_caching=spec.enable_prefix_caching,
        state_slots=spec.max_mamba_cache_size,
    )
    if 0 < memory.max_running_requests < spec.max_num_seqs:
        # Every running request holds one recurrent-state slot, taken when it starts and given
        # back when it finishes or is preempted: the state pool caps the running requests as
        # SGLang lowers max_running_requests to it.
        spec = spec.model_copy(update={"max_num_seqs": memory.max_running_requests})
    documented_rates = model.mtp_accept_rates(spec.nextn) if spec.nextn_accept_rates is None else None
    if documented_rates is not None:
        # Drafts accepted as the model's documented MTP runs report, unless the plan says otherwise:
        # every replay and search candidate then gets what the fidelity benchmark replays with.
        spec = spec.model_copy(update={"nextn_accept_rates": documented_rates})
    async_scheduling = plan.async_scheduling(spec)
    # An aggregated worker's overlap scheduler (BackendProfile.overlap_first_token_lag_passes)
    # admits as asynchronous scheduling does; its pass pricing keeps the backend's own fit.
    overlap_lag_passes = None
    if role == "agg" and not async_scheduling:
        overlap_lag_passes = backend_profile(plan.backend).overlap_first_token_lag_passes
        if overlap_lag_passes is not None and spec.first_token_lag_passes is not None:
            overlap_lag_passes = spec.first_token_lag_passes
    overlap = overlap_lag_passes is not None
    # A pass hides its framework overhead behind its kernels under asynchronous scheduling, and on
    # the decode workers of a backend whose overlap scheduler runs there (its admission unchanged).
    overlapped = async_scheduling or (
        role == "decode" and backend_profile(plan.backend).decode_workers_overlap_overhead
    )
    provider = get_perf_model(
        perf,
        model=model,
        system=system,
        shape=shape,
        backend=plan.backend,
        kv_cache_dtype=spec.kv_cache_dtype,
        nextn=spec.nextn,
        async_scheduling=overlapped,
        cuda_graph_sizes=plan.cuda_graph_sizes(spec),
        table_path=perf_table,
        moe_a2a_backend=spec.sglang.moe_a2a_backend if plan.backend == "sglang" else "none",
    )
    blocks = spec.num_gpu_blocks
    if blocks is None:
        if not memory.feasible:
            raise InfeasibleError(f"{model.name} on {system.name}: {memory.reason}", where=where)
        if isinstance(provider, AicPerfModel):  # its latency and its memory model go together
            tokens = provider.kv_tokens_per_rank(
                gpu_memory_utilization=memory.memory_fraction,
                max_num_batched_tokens=spec.max_num_batched_tokens,
                max_num_seqs=spec.max_num_seqs,
            )
            blocks = tokens // spec.block_size
        else:
            blocks = memory.num_gpu_blocks
    return ResolvedEngine(
        spec=spec,
        backend=plan.backend,
        perf=provider,
        num_gpu_blocks=blocks,
        kv_bytes_per_token_per_gpu=memory.kv_bytes_per_token_per_gpu,
        async_scheduling=async_scheduling,
        eager_pass_floor_ms=eager_pass_floor_ms(plan.backend, spec, model.num_layers, overlap=overlap),
        graphed_prefill=graphed_mla_prefill(plan.backend, spec, model, system, role=role),
        overlap_lag_passes=overlap_lag_passes,
    )


def eager_pass_floor_ms(backend: str, spec: EngineSpec, num_layers: int, *, overlap: bool = False) -> float:
    """The least a pass with prompt tokens lasts on one of the engine's pipeline stages when it
    runs without CUDA graphs: its layers times the host's launch time per layer. Less of it shows
    on an aggregated worker whose overlap scheduler prepares the pass during the one before, and
    the backend gives a stage of one GPU (no collective in its layers) its own bound; a plan's
    value holds for any stage."""
    per_layer = spec.eager_layer_ms
    if per_layer is None:
        profile = backend_profile(backend)
        overlapped = profile.overlap_eager_layer_ms if overlap else None
        per_layer = profile.eager_layer_ms if overlapped is None else overlapped
        if spec.tp * spec.attention_dp == 1:
            per_layer = min(per_layer, profile.eager_layer_ms_one_gpu)
    return per_layer * -(-num_layers // spec.pp)


class Worker:
    """A replica: ``attention_dp`` ranks that pass in lock-step (a pass lasts as long as its
    slowest rank; ranks without work take no part).

    While its ranks only decode, the worker runs a :class:`Window` of passes planned ahead
    (:mod:`lockstep`), with an event only at completions, at new work and at the window's end;
    otherwise it steps one pass of every rank with work.
    """

    def __init__(self, ranks: list[Rank], *, stretches: bool) -> None:
        self.ranks = ranks
        self.busy = False
        self.version = 0  # bumps whenever the pending event moves
        self._stepping: list[Rank] = []
        self._window: Window | None = None
        self._stretches = stretches
        # A lone rank that cannot plan when starved (Rank.plans_when_starved), whose window closed
        # on a pass that finds no blocks, is stepped at once: planning would fail on it again.
        self._lone_stepper = len(ranks) == 1 and not ranks[0].plans_when_starved
        self._must_step = False  # the window closed on a pass that only stepping can run

    def has_work(self) -> bool:
        # A plain loop, cheaper than any() over a generator: the event loop asks every idle
        # worker at every instant.
        for rank in self.ranks:  # noqa: SIM110
            if rank.has_work():
                return True
        return False

    def begin(self, now_ms: float, until_ms: float = float("inf")) -> float:
        """Start the next pass, or go on with the planned ones, at ``now_ms``; return when the
        worker's next event is (passes ending after ``until_ms``, a timeline sample, are not
        planned past the first)."""
        self.busy = True
        self.version += 1
        self._must_step = False
        if self._window is not None:
            resumed = self._resume(until_ms)
            if resumed is not None:
                return resumed
        if self._stretches and not self._must_step:
            planned = self._plan(now_ms, until_ms)
            if planned is not None:
                return planned
        self._stepping = [rank for rank in self.ranks if rank.has_work()]
        durations = [rank.begin_pass(now_ms) for rank in self._stepping]
        if len(self.ranks) > 1:
            durations = self._group_priced(durations)
        return now_ms + max(durations, default=0.0)

    def _group_priced(self, durations: list[float]) -> list[float]:
        """A stepped pass with prompt tokens on any rank, priced again with the tokens its ranks
        carry (``PerfModel.group_time_ms``): a prompt on one rank of an attention-DP worker sends
        its experts and all-to-all its own tokens, not ``attention_dp`` times them. Decode-only
        passes keep the equal-load price the planned windows give them (a worker's decode
        batches are spread evenly over its ranks). O(ranks)."""
        priced = [rank for rank, ms in zip(self._stepping, durations, strict=True) if ms > 0]
        if not any(rank.pass_args[0] for rank in priced):
            return durations
        group = busiest = 0.0
        for rank in priced:
            args = rank.pass_args
            tokens = args[0] + args[4] * args[6]  # prompt tokens + decoders x tokens per step
            group += tokens
            if tokens > busiest:
                busiest = tokens
        return [rank.reprice(group, busiest) for rank in priced]

    def _plan(self, now_ms: float, until_ms: float) -> float | None:
        """A window from ``now_ms`` when every rank with work only decodes; its first event."""
        runs: list[tuple[int, PlannedRun]] = []
        for rank in self.ranks:
            if rank.has_work():
                if not STRETCHES.ready(rank) or (run := next_run(rank)) is None:
                    return None
                runs.append((rank.rank, run))
        window = self._window = Window(self.ranks, now_ms)
        for i, run in runs:
            window.price(i, run)
        return window.lay_out(until_ms)

    def _resume(self, until_ms: float) -> float | None:
        """At a boundary of the running window: ranks with new work (or whose blocks a
        reservation took) book up to here and are priced again from here; ranks whose priced
        passes end here are priced further. None when the window closes (a rank's next pass
        must be stepped, or a timeline sample is due): every rank is then booked."""
        window = self._window
        assert window is not None
        if window.pos >= window.passes and window.final:
            self._close()
            # Where a rank ran short of blocks rather than a timeline sample being due.
            self._must_step = window.cap > window.pos and self._lone_stepper and starved(self.ranks[0])
            return None
        dirty = window.dirty
        for rank in self.ranks:
            i = rank.rank
            # Arrived prompts waiting for a running slot join at a completion, not before.
            arrived = rank.materialized and not DESTINATION.slot_bound(rank)
            if arrived or rank.waiting or rank.prefilling or i in dirty:
                window.commit(i, window.pos)
                if not rank.has_work():
                    window.drop(i)
                elif not STRETCHES.ready(rank) or not window.price(i):
                    # A lone rank would fail to plan again, on the state it was just judged on.
                    self._must_step = len(self.ranks) == 1
                    self._close()
                    return None
        dirty.clear()
        # Only at the end of the passes laid out can a rank's priced passes end.
        if window.pos >= window.passes and not window.extend():
            self._close()
            return None
        return window.lay_out(until_ms)

    def _close(self) -> list[Request]:
        """Book every rank up to the window's position and leave the window."""
        window = self._window
        assert window is not None
        self._window = None
        finished: list[Request] = []
        for i in range(len(self.ranks)):
            finished.extend(window.commit(i, window.pos))
        return finished

    def cut(self, now_ms: float, *, lag: bool = False) -> float | None:
        """New work for a rank at ``now_ms``: move the worker's next event to the end of the
        pass running now (``lag``: and of the one an asynchronous scheduler had already chosen
        after it), where the work can join. Returns the new event time, or None if unchanged."""
        window = self._window
        if window is None:
            return None  # a stepped pass: the next one is scheduled when it ends
        at = window.started(now_ms, self.busy) + lag
        if at >= window.stop or at <= window.pos:
            return None
        window.stop = at
        self.version += 1
        return window.bounds[at]

    def book_ended(self, now_ms: float) -> None:
        """Book every rank's planned passes that ended by ``now_ms`` (a timeline sample reads
        the ranks' state as stepping would have left it)."""
        window = self._window
        if window is not None:
            ended = window.ended(now_ms)
            for i in range(len(self.ranks)):
                window.commit(i, ended)

    def unbooked_blocks(self, rank: Rank, now_ms: float) -> int:
        """Blocks ``rank``'s planned passes started by ``now_ms`` took but have not booked."""
        window = self._window
        return 0 if window is None else window.unbooked_blocks(rank.rank, now_ms, self.busy)

    def ahead_blocks(self, rank: Rank) -> int:
        """Blocks all of ``rank``'s priced passes not booked yet take (started or not): a bound
        on :meth:`unbooked_blocks` at any instant."""
        window = self._window
        return 0 if window is None else window.ahead_blocks(rank.rank)

    def keep_room(self, rank: Rank, now_ms: float, ahead: int) -> float | None:
        """KV was reserved on ``rank`` at ``now_ms`` (``ahead``: its :meth:`ahead_blocks`,
        unchanged by reservations): if its planned passes no longer find their blocks, it is
        priced again at the next boundary. Returns a moved event time, or None."""
        window = self._window
        # Arrived KV reprices the rank at the next boundary anyway (its event moved there).
        if window is None or window.fits(rank.rank, ahead):
            return None
        window.dirty.add(rank.rank)
        return self.cut(now_ms)

    @property
    def planned(self) -> bool:
        """Whether the worker runs a window of planned passes (rather than a stepped pass)."""
        return self._window is not None

    def end(self, end_ms: float) -> list[Request]:
        """The worker's event at ``end_ms``: the stepped pass ended, or the window reached its
        next event; return the requests that finished."""
        self.busy = False
        window = self._window
        if window is not None:
            finished = window.settle()
            if not window.active_ahead():
                finished.extend(self._close())
            return finished
        finished = []
        for rank in self._stepping:
            finished.extend(rank.end_pass(end_ms))
        return finished


@dataclass(kw_only=True)
class Pool:
    """The routable workers of one role, their router and where their requests' results go.

    Workers that are starting or draining (under a planner) are not in ``workers``/``ranks``:
    the router never sees them.
    """

    role: str
    engine: ResolvedEngine
    collector: Collector
    unit: int
    exact: bool
    workers: list[Worker]
    ranks: list[Rank]
    router: Router
    worker_of: dict[int, Worker]
    created: int = 0  # workers built so far: the next one's index
    # Decode-pass prices bound per batch size, shared by every rank of the pool: they have one
    # perf model, tokens per step and KV capacity, so a price bound once serves them all.
    pricers: dict[int, tuple[float, float] | Callable[[float], float]] = field(default_factory=dict)
    run_pricers: dict[int, Callable[[np.ndarray], np.ndarray] | None] = field(default_factory=dict)

    def new_worker(self) -> Worker:
        """Build the pool's next worker (not yet routable: see :meth:`activate`)."""
        spec, engine = self.engine.spec, self.engine
        cls = RANK_CLASSES[backend_profile(engine.backend).passes]
        ranks = [
            cls(
                spec,
                engine.backend,
                engine.perf,
                engine.num_gpu_blocks,
                self.collector,
                exact=self.exact,
                worker=self.created,
                rank=d,
                unit=self.unit,
                role=self.role,
                tokens_per_step=1.0 + spec.nextn,
            )
            for d in range(spec.attention_dp)
        ]
        self.created += 1
        for rank in ranks:
            rank._pricers, rank._run_pricers = self.pricers, self.run_pricers
            rank.stretch_keeps_cache = self.router.reads_cached_blocks
            rank.async_admission = engine.async_scheduling or engine.overlap_lag_passes is not None
            rank.eager_pass_floor_ms = engine.eager_pass_floor_ms
            if isinstance(rank, SglangRank):
                rank.graphed_prefill = engine.graphed_prefill
            if engine.overlap_lag_passes is not None:
                rank.first_token_lag_passes = engine.overlap_lag_passes
            elif engine.async_scheduling:
                lag = spec.first_token_lag_passes
                rank.first_token_lag_passes = (
                    backend_profile(engine.backend).async_first_token_lag_passes if lag is None else lag
                )
            if spec.num_g2_blocks is not None:
                rank.tiers = host_tiers(spec, engine, self.unit, rank.pool)
                self.collector.tiers_enabled = True
        worker = Worker(ranks, stretches=not self.exact and not self.router.reads_pass_state)
        for rank in ranks:
            self.worker_of[id(rank)] = worker
        self.router.attach(ranks)
        return worker

    def activate(self, worker: Worker) -> None:
        self.workers.append(worker)
        self.ranks.extend(worker.ranks)

    def deactivate(self, worker: Worker) -> None:
        """Stop routing to ``worker`` (it drains what it already has)."""
        self.workers.remove(worker)
        self.ranks[:] = [rank for rank in self.ranks if self.worker_of[id(rank)] is not worker]


def starved(rank: Rank) -> bool:
    """Whether a rank's next pass (it is booked up to there) finds no blocks for its decoders'
    steps, so that no run can be planned from it: its readiness check fails without admitting
    anything (arrived KV joins only a pass with room), and the pass preempts."""
    if rank.stretch_keeps_cache or not rank.decoding.plans_stretches or not rank.decoders:
        return False
    return rank.ledger.blocks(rank.pass_idx) > rank.pool.available()


def host_tiers(spec: EngineSpec, engine: ResolvedEngine, unit: int, g1: BlockPool) -> HostTiers:
    per_token = spec.kv_bytes_per_token or engine.kv_bytes_per_token_per_gpu
    return HostTiers(
        g1=g1,
        unit=unit,
        block_bytes=spec.block_size * per_token,
        g2_blocks=spec.num_g2_blocks or 0,
        g3_blocks=spec.num_g3_blocks,
        g1_to_g2_gbps=spec.bandwidth_g1_to_g2_gbps,
        g2_to_g1_gbps=spec.bandwidth_g2_to_g1_gbps,
        g2_to_g3_gbps=spec.bandwidth_g2_to_g3_gbps,
        g3_to_g2_gbps=spec.bandwidth_g3_to_g2_gbps,
        offload_batch_size=spec.offload_batch_size,
    )


def build_pool(
    role: str,
    engine: ResolvedEngine,
    router_spec: RouterSpec,
    collector: Collector,
    *,
    unit: int,
    exact: bool,
    rng: np.random.Generator,
    clock: Clock | None = None,
) -> Pool:
    """A pool with its starting fleet (``replicas`` workers), all routable."""
    pool = Pool(
        role=role,
        engine=engine,
        collector=collector,
        unit=unit,
        exact=exact,
        workers=[],
        ranks=[],
        router=make_router(router_spec, rng, decode_pool=role == "decode", clock=clock),
        worker_of={},
    )
    for _ in range(engine.spec.replicas):
        pool.activate(pool.new_worker())
    return pool
