"""Host KV offload (KVBM's G2 host memory and optional G3 disk tier) of one rank.

Named units stored in the GPU pool (G1) are copied down to host memory in batches of
``offload_batch_size`` blocks; units pushed out of a full G2 move on to G3 when it exists. At
admission, a request whose prefix continues in a lower tier beyond its GPU hit is *parked*: its
lower-tier units are copied up (G3 -> G2 -> G1), registered in the GPU pool as cached units, and
the request returns to the front of the waiting queue, where its admission now hits them.

A unit being copied down stays held in G1 until its copy lands (KVBM holds the block it reads),
so the GPU pool cannot evict it mid-copy. Every copy travels over a :class:`SharedLink`:
concurrent transfers share the link's bandwidth equally (processor sharing), so a copy's
duration depends on what else is in flight. The tiers only decide what moves; the simulation
owns the clock and schedules link completions.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Sequence
from itertools import count
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aisimulate.replay.kv_cache import BlockPool
    from aisimulate.replay.kv_events import RankEvents


class SharedLink:
    """A link whose bandwidth the transfers in flight share equally; ``gbps <= 0`` is instant."""

    def __init__(self, gbps: float) -> None:
        self.bytes_per_ms = gbps * 1e6 if gbps > 0 else float("inf")
        self.active: dict[int, list[Any]] = {}  # id -> [remaining bytes, payload]
        self.updated_ms = 0.0
        self.version = 0
        self._ids = count()

    def _advance(self, now_ms: float) -> None:
        if self.active and self.bytes_per_ms != float("inf"):
            share = (now_ms - self.updated_ms) * self.bytes_per_ms / len(self.active)
            for entry in self.active.values():
                entry[0] -= share
        self.updated_ms = now_ms

    def add(self, now_ms: float, nbytes: float, payload: Any) -> None:
        self._advance(now_ms)
        self.active[next(self._ids)] = [float(nbytes), payload]
        self.version += 1

    def next_completion(self) -> float | None:
        if not self.active:
            return None
        if self.bytes_per_ms == float("inf"):
            return self.updated_ms
        least: float = min(entry[0] for entry in self.active.values())
        at: float = self.updated_ms + max(least, 0.0) * len(self.active) / self.bytes_per_ms
        return at

    def complete(self, now_ms: float) -> list[Any]:
        """Payloads of the transfers finished by ``now_ms`` (called at ``next_completion``)."""
        self._advance(now_ms)
        if not self.active:
            return []
        if self.bytes_per_ms == float("inf"):
            done = list(self.active)
        else:
            # The transfer this event was scheduled for, and any within rounding of it.
            least = min(entry[0] for entry in self.active.values())
            done = [k for k, entry in self.active.items() if entry[0] <= least + 1e-6]
        payloads = [self.active.pop(k)[1] for k in done]
        self.version += 1
        return payloads


class HostTiers:
    """G2 (and G3) LRUs of named units, the copies between tiers, and what to copy next."""

    def __init__(
        self,
        *,
        g1: BlockPool,
        unit: int,
        block_bytes: float,
        g2_blocks: int,
        g3_blocks: int | None,
        g1_to_g2_gbps: float,
        g2_to_g1_gbps: float,
        g2_to_g3_gbps: float,
        g3_to_g2_gbps: float,
        offload_batch_size: int,
    ) -> None:
        self.g1 = g1
        self.unit = unit
        self.unit_bytes = unit * block_bytes
        self.g2_units = max(g2_blocks // unit, 0)
        self.g3_units = max((g3_blocks or 0) // unit, 0)
        self.g2: OrderedDict[int, None] = OrderedDict()
        self.g3: OrderedDict[int, None] = OrderedDict()
        self.down = SharedLink(g1_to_g2_gbps)
        self.up = SharedLink(g2_to_g1_gbps)
        self.down3 = SharedLink(g2_to_g3_gbps)
        self.up3 = SharedLink(g3_to_g2_gbps)
        self.batch_units = max(offload_batch_size // unit, 1)
        self._waiting: list[int] = []  # stored in G1, not yet sent down
        self._sending: set[int] = set()
        # A lagged KV router's endpoints for the G2/G3 Stored/Removed events, by tier.
        self.events: dict[str, RankEvents] = {}

    @property
    def links(self) -> tuple[SharedLink, ...]:
        return (self.down, self.up, self.down3, self.up3)

    # ---- going down ------------------------------------------------------------------------
    def stored(self, keys: Sequence[int], now_ms: float) -> list[SharedLink]:
        """New units in G1: batch them for G2. Returns the links that got a transfer."""
        self._waiting.extend(k for k in keys if k not in self.g2 and k not in self._sending)
        if len(self._waiting) < self.batch_units:
            return []
        batch, self._waiting = self._waiting, []
        held = self.g1.pin(batch)  # a unit the GPU evicted meanwhile has nothing left to copy
        if not held:
            return []
        self._sending.update(held)
        self.down.add(now_ms, len(held) * self.unit_bytes, ("g2", held))
        return [self.down]

    def arrived(self, payload: Any, now_ms: float) -> tuple[list[SharedLink], Any]:
        """A copy finished: file the units; returns (links that got new transfers, a parked
        request's onboarding that is now complete, or None)."""
        kind = payload[0]
        if kind == "g2":
            self._sending.difference_update(payload[1])
            self.g1.unpin(payload[1])
            return self._put_g2(payload[1], now_ms), None
        if kind == "g3":
            for key in payload[1]:
                self._put(self.g3, key, self.g3_units)
            return [], None
        if kind == "stage":  # G3 -> G2 done: continue up to G1
            _, request, g2_keys, g3_keys = payload
            self._put_g2(g3_keys, now_ms)
            self.up.add(
                now_ms,
                (len(g2_keys) + len(g3_keys)) * self.unit_bytes,
                ("onboard", request, g2_keys + g3_keys),
            )
            return [self.up], None
        return [], payload  # ("onboard", request, keys)

    def _put_g2(self, keys: Sequence[int], now_ms: float) -> list[SharedLink]:
        pushed: list[int] = []
        for key in keys:
            pushed.extend(self._put(self.g2, key, self.g2_units))
        if pushed and self.g3_units:
            self.down3.add(now_ms, len(pushed) * self.unit_bytes, ("g3", pushed))
            return [self.down3]
        return []

    def _put(self, tier: OrderedDict[int, None], key: int, capacity: int) -> list[int]:
        """Insert at the MRU end; return the units pushed out of a full tier."""
        if capacity <= 0:
            return []
        new = key not in tier
        tier[key] = None
        tier.move_to_end(key)
        pushed = []
        while len(tier) > capacity:
            pushed.append(tier.popitem(last=False)[0])
        events = self.events.get("g2" if tier is self.g2 else "g3")
        if events is not None:
            if new:
                events.stored([key])
            events.removed(pushed)
        return pushed

    # ---- coming up -------------------------------------------------------------------------
    def lookup(self, keys: Sequence[int], start: int, stop: int) -> tuple[int, int]:
        """(units in G2, units only in G3) continuing the prefix ``keys[start:stop]``."""
        return tier_prefix(keys[start:stop], self.g2, self.g3)

    def onboard(self, request: Any, keys: Sequence[int], g2: int, g3: int, now_ms: float) -> list[SharedLink]:
        """Start copying a parked request's lower-tier units up to G1."""
        g2_keys, g3_keys = list(keys[:g2]), list(keys[g2 : g2 + g3])
        for key in g2_keys:
            self.g2.move_to_end(key)
        if g3_keys:
            self.up3.add(now_ms, len(g3_keys) * self.unit_bytes, ("stage", request, g2_keys, g3_keys))
            return [self.up3]
        self.up.add(now_ms, len(g2_keys) * self.unit_bytes, ("onboard", request, g2_keys))
        return [self.up]


def tier_prefix(keys: Sequence[int], g2: Container[int], g3: Container[int]) -> tuple[int, int]:
    """(units in G2, then units only reachable through G3) at the head of ``keys``: once one
    unit has to come from G3 the rest stage through G3 too."""
    in_g2 = in_g3 = 0
    for key in keys:
        if key in g2 and not in_g3:
            in_g2 += 1
        elif key in g3 or key in g2:
            in_g3 += 1
        else:
            break
    return in_g2, in_g3
