"""Dynamo's KV-aware router: send a request where its cached prefix is and the load is low.

For each candidate rank ``w`` (with ``R`` request blocks, ``bs`` tokens per block)::

    credit_w   = overlap_score_credit / (1 + decay * ((prefill_w - min prefill) / bs) / R)
    prefill    = max(0, (prefill_w + isl) / bs - credit_w * overlap_w)   (if prefill is tracked)
    decode     = active_blocks_w + blocks of the request not already active on w
    cost_w     = prefill_load_scale * prefill + decode + decode_active_request_weight * requests_w

``overlap_w`` is the request's leading cached blocks on w (as KV events have shown them, when
``kv_event_lag_ms`` delays those: see ``kv_events``; host and disk hits likewise);
``prefill_w`` the prompt tokens of requests routed to w that have not produced their first
token (net of their cache hit at routing); ``active_blocks_w`` the distinct prompt blocks of w's
unfinished requests. A decode pool (disaggregated) credits no overlap, tracks no prefill and
assumes no reuse: pure decode-load balancing, as the reference derives its decode router.
Temperature 0 takes the cheapest rank, ties broken by the seeded generator (the reference's
ties are not reproducible); a positive temperature samples ``exp(-normalised cost / T)``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_events import Clock, LaggedKvIndex
from aisimulate.replay.offload import tier_prefix
from aisimulate.replay.plan import RouterSpec
from aisimulate.replay.request import Request


class KvRouter:
    def __init__(
        self,
        spec: RouterSpec,
        rng: np.random.Generator,
        *,
        decode_pool: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.decode_pool = decode_pool
        # A decode pool credits no overlap, so it needs no picture of the caches.
        self.index: LaggedKvIndex | None = None
        if spec.kv_event_lag_ms is not None and not decode_pool:
            self.index = LaggedKvIndex(spec.kv_event_lag_ms, clock or Clock())
        self._blocks: dict[int, Counter[int]] = {}  # rank id -> active named units -> requests
        self._anon: dict[int, int] = {}  # rank id -> active unnamed prompt blocks
        self._requests: dict[int, int] = {}
        self._units: dict[int, int] = {}
        self._routed: dict[int, tuple[int, int]] = {}  # request id -> (rank id, cached tokens)
        self._any_threshold = any(
            x is not None
            for x in (
                spec.active_decode_blocks_threshold,
                spec.active_prefill_tokens_threshold,
                spec.active_prefill_tokens_threshold_frac,
            )
        )

    def attach(self, ranks: Sequence[Rank]) -> None:
        """Subscribe to the ranks' KV events, host and disk tiers included (only a lagged view
        needs them)."""
        if self.index is not None:
            for rank in ranks:
                if rank.pool.enable_prefix_caching:  # no caching, no events (as the reference)
                    rank.kv_events = self.index.sink(id(rank))
                    if rank.tiers is not None:
                        rank.tiers.events = {tier: self.index.sink(id(rank), tier) for tier in ("g2", "g3")}

    # ---- state -----------------------------------------------------------------------------
    def _device_overlap(self, r: Request, rank: Rank) -> int:
        """Leading prompt units the router believes ``rank`` caches on the device."""
        if self.index is not None:
            return self.index.match(id(rank), r.prompt_keys)
        return rank.pool.match_prefix(r.prompt_keys, len(r.prompt_keys))[0]

    def _overlaps(self, r: Request, ranks: Sequence[Rank]) -> list[int]:
        """Each rank's device overlap, read once per routing decision (costs and dispatch)."""
        if self.decode_pool:  # it credits no overlap and assumes no reuse: it never reads caches
            return [0] * len(ranks)
        return [self._device_overlap(r, rank) for rank in ranks]

    def _tier_overlap(self, r: Request, rank: Rank, device: int) -> tuple[int, int]:
        """(host, disk) units the router believes continue the device prefix on ``rank``."""
        assert rank.tiers is not None
        if self.index is None:
            return rank.tiers.lookup(r.prompt_keys, device, len(r.prompt_keys))
        index, key = self.index, id(rank)
        return tier_prefix(r.prompt_keys[device:], index.view(key, "g2"), index.view(key, "g3"))

    def _prefill_tokens(self, rank: Rank) -> int:
        """Prompt tokens routed to the rank that have not produced a first token yet."""
        routed = self._routed
        total = 0
        for queue in (rank.waiting, rank.prefilling):
            for r in queue:
                entry = routed.get(r.spec.request_id)
                if entry is not None:
                    total += r.prompt_len - entry[1]
        return total

    def costs(self, r: Request, ranks: Sequence[Rank], overlaps: Sequence[int] | None = None) -> list[float]:
        """Each rank's cost for r; ``overlaps``: the ranks' ``_device_overlap`` when the caller
        has them already."""
        if overlaps is None:
            overlaps = self._overlaps(r, ranks)
        spec, bs = self.spec, r.block_size
        isl = r.prompt_len
        blocks = -(-isl // bs)
        track_prefill = spec.router_track_prefill_tokens and not self.decode_pool
        credit = 0.0 if self.decode_pool else spec.overlap_score_credit
        reuse = spec.router_assume_kv_reuse and not self.decode_pool
        # Read once: the loop runs for every rank on every arrival.
        decay_rate = spec.overlap_score_credit_decay if track_prefill else 0.0
        track_active, load_scale = spec.router_track_active_blocks, spec.prefill_load_scale
        request_weight = spec.decode_active_request_weight
        active_units, anon, requests = self._blocks, self._anon, self._requests
        prefill = [self._prefill_tokens(rank) for rank in ranks] if track_prefill else [0] * len(ranks)
        least = min(prefill)
        keys = r.prompt_keys
        out = []
        for rank, pending, overlap in zip(ranks, prefill, overlaps, strict=True):
            unit, key = rank.unit, id(rank)
            device = overlap if credit else 0
            lower = 0.0
            if credit and rank.tiers is not None:  # host/disk hits beyond the device prefix
                g2, g3 = self._tier_overlap(r, rank, device)
                lower = (spec.host_cache_hit_weight * g2 + spec.disk_cache_hit_weight * g3) * unit
            decay = 1.0
            if decay_rate:
                decay = 1.0 / (1.0 + decay_rate * ((pending - least) / bs) / blocks)
            cost = 0.0
            if track_prefill:
                credited = credit * decay * device * unit + lower
                cost = load_scale * max(0.0, (pending + isl) / bs - credited)
            if track_active:
                active = active_units.get(key)
                if active:
                    held = unit * sum(map(active.__contains__, keys)) if reuse else 0
                    cost += len(active) * unit + anon.get(key, 0) + blocks - held
                else:
                    cost += anon.get(key, 0) + blocks
            cost += request_weight * requests.get(key, 0)
            out.append(cost)
        return out

    def should_hold(self, ranks: Sequence[Rank]) -> bool:
        """Admission control: every rank has more pending prefill than the queue threshold."""
        limit = self.spec.router_queue_threshold
        if limit is None or self.decode_pool:
            return False
        return all(self._prefill_tokens(rank) > limit * rank.spec.max_num_batched_tokens for rank in ranks)

    def _busy(self, rank: Rank, pending: int) -> bool:
        spec = self.spec
        blocks_cap = spec.active_decode_blocks_threshold
        if blocks_cap is not None and rank.pool.num_active / rank.pool.num_blocks > blocks_cap:
            return True
        if (
            spec.active_prefill_tokens_threshold is not None
            and pending > spec.active_prefill_tokens_threshold
        ):
            return True
        frac = spec.active_prefill_tokens_threshold_frac
        return frac is not None and pending > frac * rank.spec.max_num_batched_tokens

    # ---- decision ----------------------------------------------------------------------------
    def route(self, r: Request, ranks: Sequence[Rank]) -> int:
        candidates = list(range(len(ranks)))
        chosen = ranks
        if self._any_threshold:
            idle = [i for i in candidates if not self._busy(ranks[i], self._prefill_tokens(ranks[i]))]
            candidates = idle or candidates  # all busy: route among all (no admission queue)
            chosen = [ranks[i] for i in candidates]
        overlaps = self._overlaps(r, chosen)
        pick = self._select(self.costs(r, chosen, overlaps))
        self._on_dispatch(r, chosen[pick], overlaps[pick])
        return candidates[pick]

    def _select(self, costs: list[float]) -> int:
        low, high = min(costs), max(costs)
        temperature = self.spec.router_temperature
        if temperature <= 0 or high == low:
            ties = [i for i, c in enumerate(costs) if c == low]
            return ties[int(self.rng.integers(len(ties)))] if len(ties) > 1 else ties[0]
        weights = [math.exp(-((c - low) / (high - low)) / temperature) for c in costs]
        total = sum(weights)
        return int(self.rng.choice(len(costs), p=[w / total for w in weights]))

    # ---- lifecycle ---------------------------------------------------------------------------
    def _on_dispatch(self, r: Request, rank: Rank, overlap: int | None = None) -> None:
        key = id(rank)
        if overlap is None:
            overlap = self._overlaps(r, [rank])[0]
        cached = overlap * rank.unit
        self._routed[r.rid] = (key, min(cached, r.prompt_len))
        active = self._blocks.get(key)
        if active is None:
            active = self._blocks[key] = Counter()
        active.update(r.prompt_keys)
        self._units[key] = rank.unit
        self._anon[key] = self._anon.get(key, 0) + _unnamed_blocks(r, rank.unit)
        self._requests[key] = self._requests.get(key, 0) + 1

    def release(self, r: Request) -> None:
        """The request left the pool (finished, handed off, or rejected)."""
        routed = self._routed.pop(r.rid, None)
        if routed is None:
            return
        key = routed[0]
        active = self._blocks[key]
        for name in r.prompt_keys:  # each holds at least its own occurrences: never below 0
            left = active[name] - 1
            if left:
                active[name] = left
            else:
                del active[name]
        self._anon[key] -= _unnamed_blocks(r, self._units[key])
        self._requests[key] -= 1


def _unnamed_blocks(r: Request, unit: int) -> int:
    """Prompt blocks not covered by the request's named units."""
    return max(-(-r.prompt_len // r.block_size) - len(r.prompt_keys) * unit, 0)
