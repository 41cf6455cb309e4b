"""The KV router's own picture of each rank's cache: built from KV events that reach it late, or
guessed from its own routing when the engines publish none.

A live Dynamo router learns what a worker caches from *Stored* / *Removed* events on the event
plane, a little after the engine allocated or evicted the blocks, while request lifecycle edges
(first token, completion) arrive in-band and stay immediate. ``kv_event_lag_ms`` models that
delay: an event raised at simulated time ``t`` changes the router's view at ``t + lag``. Without a
lag the router reads the pools directly, which is the same picture with no bookkeeping.

Without events (``use_kv_events: false``, Dynamo's approximate mode) the router assumes that a
request's prompt blocks are cached where it sent the request, for ``router_ttl_secs``: blind to
evictions, to host and disk tiers and to anything cached before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Sequence
from dataclasses import dataclass


@dataclass
class Clock:
    """Simulated time, advanced by the event loop, read by whoever stamps events."""

    now_ms: float = 0.0


class LaggedKvIndex:
    """Per-rank, per-tier sets of cached unit names, as of ``lag_ms`` ago.

    Tier ``g1`` is the device pool; ``g2`` / ``g3`` are the host and disk tiers of KV offload,
    whose Stored/Removed events travel the same way."""

    def __init__(self, lag_ms: float, clock: Clock) -> None:
        self.lag_ms = lag_ms
        self.clock = clock
        self._pending: deque[tuple[float, tuple[int, str], bool, tuple[int, ...]]] = deque()
        self._cached: dict[tuple[int, str], set[int]] = {}

    def sink(self, rank_key: int, tier: str = "g1") -> RankEvents:
        """The event endpoint of one rank's tier (its block pool, by default)."""
        self._cached.setdefault((rank_key, tier), set())
        return RankEvents(self, (rank_key, tier))

    def record(self, view: tuple[int, str], stored: bool, keys: Sequence[int]) -> None:
        if keys:
            self._pending.append((self.clock.now_ms + self.lag_ms, view, stored, tuple(keys)))

    def view(self, rank_key: int, tier: str = "g1") -> set[int]:
        """The units the router believes the rank's tier holds now."""
        self._catch_up()
        return self._cached.get((rank_key, tier), set())

    def match(self, rank_key: int, keys: Sequence[int]) -> int:
        """Leading units of ``keys`` the router believes the rank holds on the device now."""
        return leading_in(keys, self.view(rank_key))

    def _catch_up(self) -> None:
        # The clock never goes back and the lag is fixed, so events become visible in the
        # order they were raised.
        pending, now = self._pending, self.clock.now_ms
        while pending and pending[0][0] <= now:
            _, view, stored, keys = pending.popleft()
            cached = self._cached[view]
            if stored:
                cached.update(keys)
            else:
                cached.difference_update(keys)


class ApproxKvIndex:
    """Per-rank unit names the router routed there, each until ``ttl_ms`` after its latest
    routing (a unit routed again is refreshed)."""

    def __init__(self, ttl_ms: float, clock: Clock) -> None:
        self.ttl_ms = ttl_ms
        self.clock = clock
        self._until: dict[int, dict[int, float]] = {}  # rank key -> unit -> when it is forgotten
        # (when, rank key, unit) in routing order, hence in expiry order: the TTL is fixed.
        self._expiries: deque[tuple[float, int, int]] = deque()

    def routed(self, rank_key: int, keys: Sequence[int]) -> None:
        """A request went to the rank: its prompt units count as cached there for the TTL."""
        until = self.clock.now_ms + self.ttl_ms
        held = self._until.setdefault(rank_key, {})
        for key in keys:
            held[key] = until
        self._expiries.extend((until, rank_key, key) for key in keys)

    def match(self, rank_key: int, keys: Sequence[int]) -> int:
        """Leading units of ``keys`` the router believes the rank holds now."""
        self._forget()
        return leading_in(keys, self._until.get(rank_key, {}))

    def _forget(self) -> None:
        expiries, now = self._expiries, self.clock.now_ms
        while expiries and expiries[0][0] <= now:
            until, rank_key, key = expiries.popleft()
            held = self._until[rank_key]
            if held.get(key) == until:  # not routed again since
                del held[key]


def leading_in(keys: Sequence[int], cached: Container[int]) -> int:
    """How many of ``keys``, from the first, are in ``cached``."""
    matched = 0
    for key in keys:
        if key not in cached:
            break
        matched += 1
    return matched


@dataclass(frozen=True)
class RankEvents:
    index: LaggedKvIndex
    view: tuple[int, str]

    def stored(self, keys: Sequence[int]) -> None:
        self.index.record(self.view, True, keys)

    def removed(self, keys: Sequence[int]) -> None:
        self.index.record(self.view, False, keys)
