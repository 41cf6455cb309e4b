"""What the rank's decode parts use of the rank they are part of, declared as ``Protocol``s.

:class:`~aisimulate.replay.stretch.DecodeStretches` and
:class:`~aisimulate.replay.destination.DecodeDestination` are parts of
:class:`~aisimulate.replay.engine.Rank` that hold no state of their own: each method takes the
rank as ``self``, typed by the protocol below that lists exactly the state and methods its part
reads and calls. ``engine.py`` checks that ``Rank`` is both hosts, so a rank that drops or
retypes one of them fails the type check instead of a replay. Annotations only: nothing here
runs on a pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from array import array
    from collections import deque
    from collections.abc import Callable, Sequence

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
    """What :class:`~aisimulate.replay.stretch.DecodeStretches` uses: the rank's queues, pass
    bookkeeping and pricing caches, the pass steps it books a run through, and its own methods."""

    spec: EngineSpec
    policy: AdmissionPolicy
    perf: PerfModel
    collector: Collector
    pool: BlockPool
    unit: int
    tokens_per_step: float
    capacity_tokens: int
    stretch_keeps_cache: bool
    decoding: DecodeStrategy
    ledger: Ledger
    _bursts: BurstSampler | None
    waiting: deque[Request]
    materialized: deque[Request]
    prefilling: list[Request]
    decoders: dict[int, Request]
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

    @property
    def num_running(self) -> int: ...
    def _prefix_hit(self, r: Request) -> tuple[int, int, int]: ...
    def _promote_for_stretch(self, p: int) -> bool: ...
    def _note_peak(self) -> None: ...
    def trim_pass_ends(self) -> None: ...
    def _decoder_gaps(self, end_ms: float, d: int) -> None: ...
    def _count_bursts(self, steps: int, tokens: int) -> None: ...
    def _finish_decoders(self, p: int, finished: list[Request]) -> None: ...
    def _retire(self, finished: list[Request], end_ms: float) -> list[Request]: ...
    def _head_could_start(self) -> bool: ...
    def _price_passes(self, times: list[float], d: int, contexts: Sequence[int], ctx: int) -> int: ...


class DestinationHost(Protocol):
    """What :class:`~aisimulate.replay.destination.DecodeDestination` uses: the rank's pool,
    queues and admission counters, how it starts a decoder, and its own methods."""

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
    def _next_admission(self, r: Request) -> Request: ...
    def _materialized_next(self) -> bool: ...
    def _head_stuck(self) -> bool: ...
    def _join_decoding(self, p: int) -> int | None: ...
