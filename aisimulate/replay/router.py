"""Routing an arriving request to a scheduler rank. A router returns a decision; the loop applies it.

Every router mode is one entry of :data:`ROUTERS`: its settings model (a member of
``plan.RouterSpec``) and the router built from it. Each router declares what of its ranks' state it
reads, and the pool decides from that how its ranks may run (see ``Router.reads_pass_state``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel

from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_events import Clock
from aisimulate.replay.kv_router import KvRouter
from aisimulate.replay.plan import (
    KvRouterSpec,
    LeastLoadedRouterSpec,
    QueuePolicy,
    RandomRouterSpec,
    RoundRobinRouterSpec,
    RouterSpec,
)
from aisimulate.replay.request import Request


class Router(Protocol):
    # Whether routing reads state a pass changes (KV occupancy): then the pool's ranks step pass
    # by pass, since a decode stretch books its passes' blocks only when it ends.
    reads_pass_state: bool
    # Whether routing reads which blocks the ranks have cached: then a stretch never evicts.
    reads_cached_blocks: bool
    # The order in which its admission queue releases held requests.
    queue_policy: QueuePolicy

    def route(self, request: Request, ranks: Sequence[Rank]) -> int:
        """Index into ``ranks`` of the rank that gets ``request``."""
        ...

    def release(self, request: Request) -> None:
        """The request left the pool; routers that track load forget it."""
        ...

    def should_hold(self, ranks: Sequence[Rank]) -> bool:
        """Admission control: hold arrivals in the router's queue for now."""
        ...

    def attach(self, ranks: Sequence[Rank]) -> None:
        """New ranks joined the pool (routers that watch KV events subscribe to theirs)."""
        ...


class _Stateless:
    reads_pass_state = False
    reads_cached_blocks = False
    queue_policy: QueuePolicy = "fcfs"  # it never holds a request

    def __init__(
        self,
        spec: RouterSpec,
        rng: np.random.Generator,
        *,
        decode_pool: bool = False,
        clock: Clock | None = None,
    ) -> None:
        del spec, rng, decode_pool, clock

    def release(self, request: Request) -> None:
        del request

    def should_hold(self, ranks: Sequence[Rank]) -> bool:
        del ranks
        return False

    def attach(self, ranks: Sequence[Rank]) -> None:
        del ranks


class RoundRobin(_Stateless):
    def __init__(self, spec: RouterSpec, rng: np.random.Generator, **kw: Any) -> None:
        super().__init__(spec, rng, **kw)
        self._next = 0

    def route(self, request: Request, ranks: Sequence[Rank]) -> int:
        choice = self._next % len(ranks)
        self._next = choice + 1
        return choice


class RandomRouter(_Stateless):
    def __init__(self, spec: RouterSpec, rng: np.random.Generator, **kw: Any) -> None:
        super().__init__(spec, rng, **kw)
        self._rng = rng

    def route(self, request: Request, ranks: Sequence[Rank]) -> int:
        return int(self._rng.integers(len(ranks)))


class LeastLoaded(_Stateless):
    """Fewest active KV blocks, then fewest running and waiting requests, then lowest index."""

    reads_pass_state = True

    def route(self, request: Request, ranks: Sequence[Rank]) -> int:
        return min(
            range(len(ranks)),
            key=lambda i: (ranks[i].active_blocks, ranks[i].num_running + len(ranks[i].waiting), i),
        )


class HeldRequests:
    """The entry router's admission queue, in the order its policy releases requests: oldest
    first (``fcfs``), newest first (``lcfs``), or shortest prompt first (``wspt``, Dynamo's
    weighted shortest processing time without priority hints; equal prompts oldest first)."""

    def __init__(self, policy: QueuePolicy) -> None:
        self._policy = policy
        self._heap: list[tuple[int, int, Request]] = []
        self._seq = count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, r: Request) -> None:
        seq = next(self._seq)
        if self._policy == "wspt":
            entry = (r.prompt_len, seq, r)
        else:
            entry = (0, -seq if self._policy == "lcfs" else seq, r)
        heapq.heappush(self._heap, entry)

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[2]


def make_router(
    spec: RouterSpec,
    rng: np.random.Generator,
    *,
    decode_pool: bool = False,
    clock: Clock | None = None,
) -> Router:
    """A pool's router, before any rank has joined (see ``Router.attach``)."""
    return ROUTERS[spec.mode].build(spec, rng, decode_pool=decode_pool, clock=clock)


@dataclass(frozen=True)
class RouterKind:
    """One router mode: the model of its settings and what builds its router from them."""

    spec: type[BaseModel]
    build: Callable[..., Router]


# Each router mode (``RouterSpec.mode``): its settings model and its router.
ROUTERS: dict[str, RouterKind] = {
    "round_robin": RouterKind(RoundRobinRouterSpec, RoundRobin),
    "random": RouterKind(RandomRouterSpec, RandomRouter),
    "least_loaded": RouterKind(LeastLoadedRouterSpec, LeastLoaded),
    "kv_router": RouterKind(KvRouterSpec, KvRouter),
}
