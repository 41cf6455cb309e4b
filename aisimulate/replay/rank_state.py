"""What the rank's decode parts use of the rank they work on, declared as ``Protocol``s.

:data:`~aisimulate.replay.stretch.STRETCHES` and
:data:`~aisimulate.replay.destination.DESTINATION` are parts of every
:class:`~aisimulate.replay.engine.Rank` that hold no state of their own: each method takes the
rank as an argument, typed by the protocol below that lists exactly the state and methods its
part reads and calls. ``engine.py`` checks that ``Rank`` is both hosts, so a rank that drops or
retypes one of them fails the type check instead of a replay. Annotations only: nothing here
runs on a pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from array import array
    from collections import deque
    from collections.abc import Callable

    import numpy as np

    from aisimulate.perf.model import PassRecord, PerfModel
    from aisimulate.replay.decoding import DecodeStrategy
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.kv_cache import BlockPool
    from aisimulate.replay.ledger import BurstSampler, Ledger
    from aisimulate.replay.metrics import Collector
    from aisimulate.replay.plan import EngineSpec
    from aisimulate.replay.request import Request
    from aisimulate.replay.scheduler import AdmissionPolicy


class StretchHost(Protocol):
    """What :class:`~aisimulate.replay.stretch.DecodeStretches` uses: the rank's decoders, pass
    bookkeeping and pricing caches, the steps it books a run through, and the scheduler's say
    on whether the next pass only decodes (and what a booked run does to its own state)."""

    perf: PerfModel
    collector: Collector
    pool: BlockPool
    tokens_per_step: float
    capacity_tokens: int
    stretch_keeps_cache: bool
    decoding: DecodeStrategy
    ledger: Ledger
    _bursts: BurstSampler | None
    materialized: deque[Request]
    prefilling: list[Request]
    decoders: dict[int, Request]
    _fresh: list[Request]
    pass_idx: int
    pass_end_ms: array[float]
    finish_at: dict[int, list[Request]]
    finish_passes: list[int]
    dec_ctx: int
    reserved_blocks: int
    last_pass: PassRecord | None
    _pricers: dict[int, tuple[float, float] | Callable[[float], float]]
    _run_pricers: dict[int, Callable[[np.ndarray], np.ndarray] | None]
    _last_start_ms: float
    _last_end_ms: float

    def _note_peak(self) -> None: ...
    def trim_pass_ends(self) -> None: ...
    def _finish_decoders(self, p: int, finished: list[Request]) -> None: ...
    def _retire(self, finished: list[Request], end_ms: float) -> list[Request]: ...
    def _head_could_start(self) -> bool: ...
    def _promote_for_stretch(self, p: int) -> bool: ...
    def _stretch_booked(self, ends: array[float], start_ms: float) -> None: ...


class DestinationHost(Protocol):
    """What :class:`~aisimulate.replay.destination.DecodeDestination` uses: the rank's pool,
    queues and admission counters, and how it starts a decoder."""

    spec: EngineSpec
    policy: AdmissionPolicy
    pool: BlockPool
    block_size: int
    unit: int
    decoding: DecodeStrategy
    ledger: Ledger
    waiting: deque[Request]
    materialized: deque[Request]
    pending_destinations: deque[tuple[Request, Request, Rank]]
    reserved_blocks: int
    _admissions: int

    @property
    def num_running(self) -> int: ...
    def _prefix_hit(self, r: Request) -> tuple[int, int, int]: ...
    def _note_peak(self) -> None: ...
    def _start_decoding(self, r: Request, next_pass: int, *, first_single: bool = False) -> None: ...
