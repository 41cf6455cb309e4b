"""The KV router's own picture of each rank's cache: built from KV events that reach it late, or
guessed from its own routing when the engines publish none.

A live Dynamo router learns what a worker caches from *Stored* / *Removed* events on the event
plane, a little after the engine allocated or evicted the blocks, while request lifecycle edges
(first token, completion) arrive in-band and stay immediate. ``kv_event_lag_ms`` models that
delay: an event raised at simulated time ``t`` changes the router's view at ``t + lag``. Without a
lag the events change it at once, so it is the pools' own picture; either way it is one index over
all ranks (:class:`PrefixIndex`), so a route costs per prompt unit, not per rank and unit.

Without events (``use_kv_events: false``, Dynamo's approximate mode) the router assumes that a
request's prompt blocks are cached where it sent the request, for ``router_ttl_secs``: blind to
evictions, to host and disk tiers and to anything cached before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass


@dataclass
class Clock:
    """Simulated time, advanced by the event loop, read by whoever stamps events."""

    now_ms: float = 0.0


class PrefixIndex:
    """Unit name -> the ranks holding it, one bit per rank.

    Routing asks every candidate rank for the request's leading cached units; per rank that is a
    walk over the prompt, per request over ranks x units. With the holders of each name as one
    integer, a single walk over the prompt narrows the set of ranks still matching, and a rank's
    match ends where its bit drops out: O(prompt units) per request, whatever the fleet size.
    Kept current by the KV events, so it costs per stored or removed unit, not per route."""

    __slots__ = ("_holders",)

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}

    def add(self, bit: int, keys: Iterable[int]) -> None:
        holders = self._holders
        for key in keys:
            holders[key] = holders.get(key, 0) | bit

    def remove(self, bit: int, keys: Iterable[int]) -> None:
        holders = self._holders
        for key in keys:
            left = holders.get(key, 0) & ~bit
            if left:
                holders[key] = left
            else:
                holders.pop(key, None)

    def leading(self, keys: Sequence[int], bits: Sequence[int]) -> list[int]:
        """For each rank bit, how many of ``keys``, from the first, that rank holds (a bit of 0,
        a rank that publishes nothing, holds none)."""
        holders = self._holders
        matching = 0
        for bit in bits:
            matching |= bit
        depth = 0
        drops: list[tuple[int, int]] = []  # (ranks whose match ends here, its length)
        for key in keys:
            if not matching:
                break
            held = holders.get(key, 0) & matching
            if held != matching:
                drops.append((matching ^ held, depth))
                matching = held
            depth += 1
        if not drops:
            return [depth if bit else 0 for bit in bits]
        out = []
        for bit in bits:
            if bit & matching:
                out.append(depth)
                continue
            length = 0
            for gone, at in drops:
                if bit & gone:
                    length = at
                    break
            out.append(length)
        return out


class KvEventIndex:
    """What the KV events have shown the router: the device units of every rank (a
    :class:`PrefixIndex`) and the host/disk tiers' units per rank, as of ``lag_ms`` ago, or as of
    now when ``lag_ms`` is None (then it is the pools' own picture, kept by their events).

    Tier ``g1`` is the device pool; ``g2`` / ``g3`` are the host and disk tiers of KV offload,
    whose Stored/Removed events travel the same way. A rank is named by its bit in the index."""

    def __init__(self, lag_ms: float | None, clock: Clock) -> None:
        self.lag_ms = lag_ms
        self.clock = clock
        self.device = PrefixIndex()
        self._pending: deque[tuple[float, tuple[int, str], bool, tuple[int, ...]]] = deque()
        self._tiers: dict[tuple[int, str], set[int]] = {}

    def sink(self, bit: int, tier: str = "g1") -> RankEvents:
        """The event endpoint of one rank's tier (its block pool, by default)."""
        if tier != "g1":
            self._tiers.setdefault((bit, tier), set())
        return RankEvents(self, (bit, tier))

    def record(self, view: tuple[int, str], stored: bool, keys: Sequence[int]) -> None:
        if not keys:
            return
        if self.lag_ms is None:
            self._apply(view, stored, keys)
        else:
            self._pending.append((self.clock.now_ms + self.lag_ms, view, stored, tuple(keys)))

    def view(self, bit: int, tier: str) -> set[int]:
        """The units the router believes the rank's host (``g2``) or disk (``g3``) tier holds now."""
        self._catch_up()
        return self._tiers.get((bit, tier), set())

    def matches(self, bits: Sequence[int], keys: Sequence[int]) -> list[int]:
        """Leading units of ``keys`` the router believes each rank holds on the device now."""
        self._catch_up()
        return self.device.leading(keys, bits)

    def _apply(self, view: tuple[int, str], stored: bool, keys: Sequence[int]) -> None:
        bit, tier = view
        if tier == "g1":
            if stored:
                self.device.add(bit, keys)
            else:
                self.device.remove(bit, keys)
        elif stored:
            self._tiers[view].update(keys)
        else:
            self._tiers[view].difference_update(keys)

    def _catch_up(self) -> None:
        # The clock never goes back and the lag is fixed, so events become visible in the
        # order they were raised.
        pending, now = self._pending, self.clock.now_ms
        while pending and pending[0][0] <= now:
            _, view, stored, keys = pending.popleft()
            self._apply(view, stored, keys)


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
    index: KvEventIndex
    view: tuple[int, str]

    def stored(self, keys: Sequence[int]) -> None:
        self.index.record(self.view, True, keys)

    def removed(self, keys: Sequence[int]) -> None:
        self.index.record(self.view, False, keys)
