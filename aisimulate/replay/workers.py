"""Building the fleet: engines resolved against the catalog, workers, and pools of workers."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass
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
from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_cache import BlockPool
from aisimulate.replay.kv_events import Clock
from aisimulate.replay.metrics import Collector
from aisimulate.replay.offload import HostTiers
from aisimulate.replay.plan import DeploymentPlan, EngineSpec, RouterSpec
from aisimulate.replay.request import Request
from aisimulate.replay.router import Router, make_router
from aisimulate.replay.sglang import SglangRank

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


def resolve_frontend_latency_ms(plan: DeploymentPlan) -> float:
    """The plan's frontend latency, or where it sets none, its backend's value fitted to measured
    serving runs: every replay and search candidate then carries the time real requests spend
    outside the engine, as the fidelity benchmark's replays do."""
    if plan.frontend_latency_ms is not None:
        return plan.frontend_latency_ms
    return e2e_frontend_latency_ms(plan.backend)


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
        nextn=spec.nextn,
        enable_prefix_caching=spec.enable_prefix_caching,
        state_slots=spec.max_mamba_cache_size,
    )
    if 0 < memory.max_running_requests < spec.max_num_seqs:
        # Every running request holds one recurrent-state slot, taken when it starts and given
        # back when it finishes or is preempted: the state pool caps the running requests as
        # SGLang lowers max_running_requests to it.
        spec = spec.model_copy(update={"max_num_seqs": memory.max_running_requests})
    async_scheduling = plan.async_scheduling(spec)
    provider = get_perf_model(
        perf,
        model=model,
        system=system,
        shape=shape,
        backend=plan.backend,
        kv_cache_dtype=spec.kv_cache_dtype,
        nextn=spec.nextn,
        async_scheduling=async_scheduling,
        cuda_graph_sizes=plan.cuda_graph_sizes(spec),
        table_path=perf_table,
    )
    blocks = spec.num_gpu_blocks
    if blocks is None:
        if not memory.feasible:
            raise InfeasibleError(f"{model.name} on {system.name}: {memory.reason}", where=where)
        if isinstance(provider, AicPerfModel):  # its latency and its memory model go together
            tokens = provider.kv_tokens_per_rank(
                gpu_memory_utilization=spec.gpu_memory_utilization,
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
    )


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
        self._stretch: array[float] | None = None
        self._stretches = stretches and len(ranks) == 1

    def has_work(self) -> bool:
        # A plain loop, cheaper than any() over a generator: the event loop asks every idle
        # worker at every instant.
        for rank in self.ranks:  # noqa: SIM110
            if rank.has_work():
                return True
        return False

    def begin(self, now_ms: float, horizon_ms: float = float("inf"), until_ms: float = float("inf")) -> float:
        """Start the next pass (or stretch) at ``now_ms``; return when it ends."""
        self.busy = True
        self.version += 1
        if self._stretches:
            ends = self.ranks[0].plan_stretch(now_ms, horizon_ms, until_ms)
            if ends is not None:
                self._stretch = ends
                return ends[-1]
        self._stepping = [rank for rank in self.ranks if rank.has_work()]
        durations = [rank.begin_pass(now_ms) for rank in self._stepping]
        return now_ms + max(durations, default=0.0)

    def cut(self, now_ms: float, *, lag: bool = False) -> float | None:
        """A request arrived at ``now_ms``: keep only the stretch's passes that started before
        it (``lag``: and the one an asynchronous scheduler had already chosen after those).
        Returns the new end time, or None if nothing changed."""
        ends = self._stretch
        if ends is None or len(ends) == 1:
            return None
        keep = 1 + lag + min(bisect_left(ends, now_ms), len(ends) - 1)
        if keep >= len(ends):
            return None
        self._stretch = ends[:keep]
        self.version += 1
        return ends[keep - 1]

    @property
    def stretch_passes(self) -> int:
        """Passes of the running stretch (0 when none)."""
        return 0 if self._stretch is None else len(self._stretch)

    def end(self, end_ms: float) -> list[Request]:
        self.busy = False
        if self._stretch is not None:
            ends, self._stretch = self._stretch, None
            return self.ranks[0].commit_stretch(ends)
        finished: list[Request] = []
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
            rank.stretch_keeps_cache = self.router.reads_cached_blocks
            rank.async_admission = engine.async_scheduling
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
