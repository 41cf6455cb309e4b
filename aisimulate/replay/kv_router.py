"""Dynamo's KV-aware router: send a request where its cached prefix is and the load is low.

For each candidate rank ``w`` (with ``R`` request blocks, ``bs`` tokens per block)::

    credit_w   = overlap_score_credit / (1 + decay * ((prefill_w - min prefill) / bs) / R)
    prefill    = max(0, (prefill_w + isl) / bs - credit_w * overlap_w)   (if prefill is tracked)
    decode     = active_blocks_w + blocks of the request not already active on w
    cost_w     = prefill_load_scale * prefill + decode + decode_active_request_weight * requests_w

``overlap_w`` is the request's leading cached blocks on w (as KV events have shown them, when
``kv_event_lag_ms`` delays those, or as the router guesses them without events: see
``kv_events``; host and disk hits likewise);
``prefill_w`` the prompt tokens of requests routed to w that have not produced their first
token (net of their cache hit at routing); ``active_blocks_w`` the distinct prompt blocks of w's
unfinished requests. A decode pool (disaggregated) credits no overlap, tracks no prefill and
assumes no reuse: pure decode-load balancing, as the reference derives its decode router.
Temperature 0 takes the cheapest rank, ties broken by the seeded generator (the reference's
ties are not reproducible); a positive temperature samples ``exp(-normalised cost / T)``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_events import ApproxKvIndex, Clock, LaggedKvIndex, leading_in
from aisimulate.replay.offload import tier_prefix
from aisimulate.replay.plan import KvRouterSpec
from aisimulate.replay.request import Request


class _Slots:
    """What the router tracks of one rank's requests (the reference's active-sequence tracker)."""

    __slots__ = ("active", "anon", "pending", "requests", "unit")

    def __init__(self, unit: int) -> None:
        self.unit = unit
        self.active: Counter[int] = Counter()  # active named units -> requests holding them
        self.anon = 0  # active unnamed prompt blocks
        # Prompt tokens routed here, net of their cache hit, until their first token: added at
        # dispatch, removed at the first token, not re-added when a preempted request computes
        # its prompt again (as the reference). A decode pool prefills nothing.
        self.pending = 0
        self.requests = 0


class KvRouter:
    def __init__(
        self,
        spec: KvRouterSpec,
        rng: np.random.Generator,
        *,
        decode_pool: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.decode_pool = decode_pool
        # It reads cached prefixes, and with a busy threshold on active blocks per-pass occupancy.
        self.reads_cached_blocks = True
        self.reads_pass_state = spec.active_decode_blocks_threshold is not None
        self.queue_policy = spec.router_queue_policy
        # A decode pool credits no overlap, so it needs no picture of the caches.
        self.index: LaggedKvIndex | None = None  # what late KV events have shown
        self.guess: ApproxKvIndex | None = None  # without KV events: where it routed what
        if spec.kv_event_lag_ms is not None and not decode_pool:
            self.index = LaggedKvIndex(spec.kv_event_lag_ms, clock or Clock())
        if not spec.use_kv_events and not decode_pool:
            self.guess = ApproxKvIndex(spec.router_ttl_secs * 1000.0, clock or Clock())
        self._slots: dict[int, _Slots] = {}  # rank id -> its tracked requests
        self._routed: dict[int, list[Any]] = {}  # request id -> [its rank's _Slots, its pending tokens]
        self._any_threshold = any(
            x is not None
            for x in (
                spec.active_decode_blocks_threshold,
                spec.active_prefill_tokens_threshold,
                spec.active_prefill_tokens_threshold_frac,
            )
        )
        # The cost's settings, read once: it runs for every rank on every arrival.
        self._track_prefill = spec.router_track_prefill_tokens and not decode_pool
        self._credit = 0.0 if decode_pool else spec.overlap_score_credit
        self._reuse = spec.router_assume_kv_reuse and not decode_pool
        self._decay_rate = spec.overlap_score_credit_decay if self._track_prefill else 0.0

    def attach(self, ranks: Sequence[Rank]) -> None:
        """Hear the ranks' first tokens, and subscribe to their KV events, host and disk tiers
        included (only a lagged view needs them)."""
        for rank in ranks:
            self._slots[id(rank)] = _Slots(rank.unit)
            if not self.decode_pool:
                rank.on_first_token = self._prefilled
        if self.index is not None:
            for rank in ranks:
                if rank.pool.enable_prefix_caching:  # no caching, no events (as the reference)
                    rank.kv_events = self.index.sink(id(rank))
                    if rank.tiers is not None:
                        rank.tiers.events = {tier: self.index.sink(id(rank), tier) for tier in ("g2", "g3")}

    # ---- state -----------------------------------------------------------------------------
    def _device_overlap(self, r: Request, rank: Rank) -> int:
        """Leading prompt units the router believes ``rank`` caches on the device."""
        view = self.index or self.guess
        if view is not None:
            return view.match(id(rank), r.prompt_keys)
        return rank.pool.match_prefix(r.prompt_keys, len(r.prompt_keys))[0]

    def _overlaps(self, r: Request, ranks: Sequence[Rank]) -> list[int]:
        """Each rank's device overlap, read once per routing decision (costs and dispatch)."""
        if self.decode_pool:  # it credits no overlap and assumes no reuse: it never reads caches
            return [0] * len(ranks)
        return [self._device_overlap(r, rank) for rank in ranks]

    def _tier_overlap(self, r: Request, rank: Rank, device: int) -> tuple[int, int]:
        """(host, disk) units the router believes continue the device prefix on ``rank``."""
        assert rank.tiers is not None
        if self.guess is not None:  # without events it knows nothing of the lower tiers
            return 0, 0
        if self.index is None:
            return rank.tiers.lookup(r.prompt_keys, device, len(r.prompt_keys))
        index, key = self.index, id(rank)
        return tier_prefix(r.prompt_keys[device:], index.view(key, "g2"), index.view(key, "g3"))

    def _prefill_tokens(self, rank: Rank) -> int:
        """Prompt tokens routed to the rank that have not produced a first token yet."""
        return self._slots[id(rank)].pending

    def costs(self, r: Request, ranks: Sequence[Rank], overlaps: Sequence[int] | None = None) -> list[float]:
        """Each rank's cost for r; ``overlaps``: the ranks' ``_device_overlap`` when the caller
        has them already."""
        if overlaps is None:
            overlaps = self._overlaps(r, ranks)
        spec, bs = self.spec, r.block_size
        isl = r.prompt_len
        blocks = -(-isl // bs)
        track_prefill, credit, decay_rate = self._track_prefill, self._credit, self._decay_rate
        reuse = self._reuse
        track_active, load_scale = spec.router_track_active_blocks, spec.prefill_load_scale
        request_weight = spec.decode_active_request_weight
        slots = [self._slots[id(rank)] for rank in ranks]
        least = min(s.pending for s in slots) if decay_rate else 0
        keys = r.prompt_keys
        out = []
        for rank, slot, overlap in zip(ranks, slots, overlaps, strict=True):
            unit = slot.unit
            cost = 0.0
            if track_prefill:
                pending = slot.pending
                decay = 1.0 / (1.0 + decay_rate * ((pending - least) / bs) / blocks) if decay_rate else 1.0
                credited = credit * decay * overlap * unit
                if credit and rank.tiers is not None:  # host/disk hits beyond the device prefix
                    g2, g3 = self._tier_overlap(r, rank, overlap)
                    credited += (spec.host_cache_hit_weight * g2 + spec.disk_cache_hit_weight * g3) * unit
                cost = load_scale * max(0.0, (pending + isl) / bs - credited)
            if track_active:
                active = slot.active
                # Names are chained, so the request's units already active form a prefix.
                held = unit * leading_in(keys, active) if reuse and active else 0
                cost += len(active) * unit + slot.anon + blocks - held
            out.append(cost + request_weight * slot.requests)
        return out

    def should_hold(self, ranks: Sequence[Rank]) -> bool:
        """Admission control: every rank has more pending prefill than the queue threshold."""
        limit = self.spec.router_queue_threshold
        if limit is None or self.decode_pool:
            return False
        slots = self._slots
        for rank in ranks:  # noqa: SIM110 (a plain loop: asked at every event while requests are held)
            if slots[id(rank)].pending <= limit * rank.spec.max_num_batched_tokens:
                return False
        return True

    def _busy(self, rank: Rank) -> bool:
        spec = self.spec
        blocks_cap = spec.active_decode_blocks_threshold
        if blocks_cap is not None and rank.pool.num_active / rank.pool.num_blocks > blocks_cap:
            return True
        pending = self._prefill_tokens(rank)
        if (
            spec.active_prefill_tokens_threshold is not None
            and pending > spec.active_prefill_tokens_threshold
        ):
            return True
        frac = spec.active_prefill_tokens_threshold_frac
        return frac is not None and pending > frac * rank.spec.max_num_batched_tokens

    # ---- decision ----------------------------------------------------------------------------
    def route(self, r: Request, ranks: Sequence[Rank]) -> int:
        candidates: Sequence[int] = range(len(ranks))
        chosen = ranks
        if self._any_threshold:
            idle = [i for i, rank in enumerate(ranks) if not self._busy(rank)]
            if idle:  # all busy: route among all (no admission queue)
                candidates, chosen = idle, [ranks[i] for i in idle]
        overlaps = self._overlaps(r, chosen)
        pick = self._select(self.costs(r, chosen, overlaps))
        self._on_dispatch(r, chosen[pick], overlaps[pick])
        return candidates[pick]

    def _select(self, costs: list[float]) -> int:
        low = min(costs)
        temperature = self.spec.router_temperature
        if temperature > 0:
            high = max(costs)
            if high > low:
                # Inverse CDF of the softmax: one uniform draw (Generator.choice with p costs 10x).
                spread = (high - low) * temperature
                cumulative = list(accumulate(math.exp((low - c) / spread) for c in costs))
                return bisect_right(cumulative, self.rng.random() * cumulative[-1])
        ties = [i for i, c in enumerate(costs) if c == low]
        return ties[int(self.rng.integers(len(ties)))] if len(ties) > 1 else ties[0]

    # ---- lifecycle ---------------------------------------------------------------------------
    def _on_dispatch(self, r: Request, rank: Rank, overlap: int) -> None:
        slot = self._slots[id(rank)]
        pending = 0 if self.decode_pool else max(r.prompt_len - overlap * slot.unit * r.block_size, 0)
        self._routed[r.rid] = [slot, pending]
        slot.pending += pending
        slot.active.update(r.prompt_keys)
        slot.anon += _unnamed_blocks(r, slot.unit)
        slot.requests += 1
        if self.guess is not None:
            self.guess.routed(id(rank), r.prompt_keys)

    def _prefilled(self, r: Request) -> None:
        """The request's first token: its prompt no longer weighs on its rank's prefill."""
        routed = self._routed.get(r.rid)
        if routed is not None:
            routed[0].pending -= routed[1]
            routed[1] = 0

    def release(self, r: Request) -> None:
        """The request left the pool (finished, handed off, or rejected)."""
        routed = self._routed.pop(r.rid, None)
        if routed is None:
            return
        slot, pending = routed
        slot.pending -= pending
        active = slot.active
        for name in r.prompt_keys:  # each holds at least its own occurrences: never below 0
            left = active[name] - 1
            if left:
                active[name] = left
            else:
                active.pop(name)  # dict.pop: Counter.__delitem__ is Python code
        slot.anon -= _unnamed_blocks(r, slot.unit)
        slot.requests -= 1


def _unnamed_blocks(r: Request, unit: int) -> int:
    """Prompt blocks not covered by the request's named units."""
    return max(-(-r.prompt_len // r.block_size) - len(r.prompt_keys) * unit, 0)
