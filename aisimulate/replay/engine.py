"""One scheduler rank of a worker: vLLM-style batching over a KV block pool.

Each pass (``begin_pass`` at its start, ``end_pass`` when it ends):

1. running requests first, in admission order: decoding requests take one token each, then
   requests mid-prefill take their next chunk, all under ``max_num_batched_tokens``; when KV
   blocks run out the newest running request is preempted (``lifo``; ``fifo`` takes the oldest)
   and recomputed later;
2. if nobody was preempted, waiting requests are admitted head-of-line while they fit
   (the :class:`AdmissionPolicy` decides: vLLM checks the whole prompt, TRT-LLM reserves blocks
   to completion and never preempts);
3. the perf model prices the pass; every token it emits is stamped at the pass end.

Decoding requests are kept as aggregates rather than visited every pass (the fast path): what
each emits and takes on every pass until it finishes is known when it starts decoding, and a
:mod:`ledger <aisimulate.replay.ledger>` keeps the batch's totals per pass. Per-pass work is
therefore independent of the batch size, speculative (MTP) bursts included.
``exact=True`` visits every decoding request every pass instead (the reference path the tests
compare against). The rank picks one of the two :mod:`decoding <aisimulate.replay.decoding>`
strategies once, when it is built.

Two parts of the rank hold no state of their own and take the rank as an argument:
:mod:`stretch <aisimulate.replay.stretch>` (runs of decode-only passes planned ahead) and
:mod:`destination <aisimulate.replay.destination>` (the decode side of disaggregation); what
each uses of the rank is declared in :mod:`rank_state <aisimulate.replay.rank_state>` and
checked at the end of this module. Every token is stamped by the rules of
:mod:`stamping <aisimulate.replay.stamping>`.
"""

from __future__ import annotations

import weakref
from array import array
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from aisimulate.catalog.backends import backend_profile
from aisimulate.perf.model import PassRecord, PerfModel
from aisimulate.replay.decoding import EXACT, LEDGER, DecodeStrategy, drop_finish_pass
from aisimulate.replay.destination import DESTINATION
from aisimulate.replay.kv_cache import BlockPool, own_run_key
from aisimulate.replay.kv_events import RankEvents
from aisimulate.replay.ledger import BurstLedger, BurstSampler, Ledger, OneTokenLedger
from aisimulate.replay.metrics import Collector
from aisimulate.replay.offload import HostTiers, SharedLink
from aisimulate.replay.plan import EngineSpec
from aisimulate.replay.rank_state import DestinationHost, StretchHost
from aisimulate.replay.request import Request
from aisimulate.replay.scheduler import POLICIES, AdmissionPolicy, ceil_div
from aisimulate.replay.stamping import prompt_token, second_token_pass

TRIM_PASSES = 4096  # pass ends piled up before a rank looks for ones no decoder reads


def chunk_totals(chunks: list[tuple[int, int, Request]]) -> tuple[int, int, float, int]:
    """(new tokens, requests, causal attention pairs, cached context) of a pass's prefill
    chunks, each given as (tokens taken, tokens computed before, request): the prefill
    arguments of ``PerfModel.time_ms``, in its order."""
    tokens = context = 0
    for take, done, _ in chunks:
        tokens += take
        context += done
    # sum() itself: it rounds floats its own way (compensated from Python 3.12 on).
    pairs = sum(take * (done + (take + 1) / 2) for take, done, _ in chunks)
    return tokens, len(chunks), float(pairs), context


def weak_callback(method: Callable[[list[int]], None]) -> Callable[[list[int]], None]:
    """``method``, without keeping its object alive. A pool calling back into its rank through
    bound methods would tie the two into a reference cycle: everything a replay built would then
    wait for the cyclic garbage collector instead of being freed when the replay returns."""
    ref = weakref.WeakMethod(method)
    return lambda keys: ref()(keys)  # type: ignore[misc]


class Rank:
    """A scheduler and its KV pool (one attention-DP rank of a worker)."""

    # Whether a rank whose next pass finds no blocks may still plan a run there: false where the
    # readiness check admits nothing without room (arrived KV joins only a pass with room), so a
    # worker of one such rank steps that pass at once instead of planning in vain.
    plans_when_starved = False

    def __init__(
        self,
        spec: EngineSpec,
        backend: str,
        perf: PerfModel,
        num_gpu_blocks: int,
        collector: Collector,
        *,
        exact: bool = False,
        worker: int = 0,
        rank: int = 0,
        tokens_per_step: float = 1.0,
        unit: int = 1,
        role: str = "agg",
    ) -> None:
        self.spec = spec
        self.role = role  # agg | prefill | decode
        self.stretch_keeps_cache = False
        self.policy: AdmissionPolicy = POLICIES[backend_profile(backend).admission]()
        self.perf = perf
        self.collector = collector
        self.worker = worker
        self.rank = rank
        self.block_size = spec.block_size
        self.unit = unit
        self.pool = BlockPool(
            num_gpu_blocks,
            unit=unit,
            enable_prefix_caching=spec.enable_prefix_caching,
            on_stored=weak_callback(self._stored),
            on_removed=weak_callback(self._removed),
        )
        self.tiers: HostTiers | None = None  # host offload, attached by the pool builder
        self.kv_events: RankEvents | None = None  # a lagged KV router's view, attached likewise
        # A KV router tracking pending prefill hears of each request's first token, attached likewise.
        self.on_first_token: Callable[[Request], None] | None = None
        self._new_units: list[int] = []
        self._to_onboard: list[tuple[Request, int, int, int]] = []
        self.capacity_tokens = num_gpu_blocks * spec.block_size
        self.tokens_per_step = tokens_per_step
        self.decoding: DecodeStrategy = EXACT if self.decodes_exactly(spec, exact=exact) else LEDGER
        rates = spec.accept_rates
        self._bursts = (
            BurstSampler(rates, np.random.default_rng([spec.mtp_seed, worker, rank])) if rates else None
        )
        self.ledger: Ledger = BurstLedger(spec.block_size) if rates else OneTokenLedger(spec.block_size)
        self.waiting: deque[Request] = deque()
        # Decode role: requests whose KV arrived from a prefill worker, ready to decode.
        self.materialized: deque[Request] = deque()
        # Decode role: hand-offs routed here that wait to reserve KV, in arrival order, each with
        # its prefill copy and the prefill rank holding its KV (the event loop drives them).
        self.pending_destinations: deque[tuple[Request, Request, Rank]] = deque()
        self.prefilling: list[Request] = []
        self.decoders: dict[int, Request] = {}
        self._admissions = 0
        self.pass_idx = 0
        # Pass ends from pass ``ends_from`` on (see :meth:`pass_end`): the older ones no live
        # decoder reads are dropped now and then, or a long replay keeps 8 bytes a rank pass.
        self.pass_end_ms = array("d")
        self.ends_from = 0
        self._trim_at = TRIM_PASSES
        self.finish_at: dict[int, list[Request]] = {}
        self.finish_passes: list[int] = []  # the keys of finish_at, ascending
        self.dec_ctx = 0  # sum over decoders of computed tokens at the start of the pass
        # Blocks promised to running requests to completion but not yet held (read only by
        # TRT-LLM's policy; other policies promise nothing, so it merely counts down there).
        self.reserved_blocks = 0
        self.num_preemptions = 0
        self.max_active_blocks = 0
        self._completing: list[Request] = []
        self.preempted_in_pass = False  # the latest pass preempted someone: it admits nobody
        self._now = 0.0
        # Decoders that have not yet had a decode pass: their previous token came out at a
        # time of their own (always the previous pass end under vLLM, an extend pass in SGLang).
        self._fresh: list[Request] = []
        self.last_pass: PassRecord | None = None  # None before the first pass
        # The latest pass's ``PerfModel.time_ms`` arguments: its worker prices it again once
        # every rank of the lock-step pass has scheduled (:meth:`reprice`).
        self.pass_args: tuple[float, ...] = ()
        # Decode-pass prices bound per batch size (see stretch.py).
        self._pricers: dict[int, tuple[float, float] | Callable[[float], float]] = {}
        self._run_pricers: dict[int, Callable[[np.ndarray], np.ndarray] | None] = {}
        # vLLM's async scheduling chooses pass n+1 when pass n starts: a request that arrives
        # while pass n runs can join pass n+2 at the earliest (set by the pool builder).
        self.async_admission = False
        # Passes (of the pass that computed it) before a first token reaches the client (set by
        # the pool builder from the backend profile; 0: at the pass end).
        self.first_token_lag_passes = 0.0
        # The least a pass with prompt tokens lasts when it runs without CUDA graphs (set by the
        # pool builder from BackendProfile.eager_layer_ms; 0: no floor).
        self.eager_pass_floor_ms = 0.0
        self._last_start_ms = self._last_end_ms = -1.0
        self._admit_until_ms = 0.0  # waiting requests enqueued later wait for the next pass

    @staticmethod
    def decodes_exactly(spec: EngineSpec, *, exact: bool) -> bool:
        """Whether the rank steps every decoder every pass (:data:`EXACT`): asked for, or needed
        because the ledger's aggregate step assumes that every decoding request fits the token
        budget and that a preemption victim is never already scheduled in the pass (LIFO only)."""
        return exact or spec.max_num_seqs > spec.max_num_batched_tokens or spec.preemption_mode == "fifo"

    # ---- host offload --------------------------------------------------------------------
    def _stored(self, keys: list[int]) -> None:
        if self.tiers is not None:
            self._new_units.extend(keys)
        if self.kv_events is not None:
            self.kv_events.stored(keys)

    def _removed(self, keys: list[int]) -> None:
        if self.kv_events is not None:
            self.kv_events.removed(keys)

    def link_work(self, now_ms: float) -> list[SharedLink]:
        """Start the copies this pass asked for (offload of new units, onboarding of parked
        requests); returns the links that got transfers."""
        tiers = self.tiers
        if tiers is None:
            return []
        links: list[SharedLink] = []
        if self._new_units:
            links += tiers.stored(self._new_units, now_ms)
            self._new_units = []
        for r, start, g2, g3 in self._to_onboard:
            r.parked_ms = now_ms
            links += tiers.onboard(r, r.prompt_keys[start:], g2, g3, now_ms)
        self._to_onboard = []
        return links

    def finish_onboard(self, r: Request, keys: list[int], now_ms: float, room: int) -> None:
        """Lower-tier units arrived: cache them and put r back at the head of the queue."""
        placed = self.pool.cache_units(keys, room)
        if self.kv_events is not None:
            self.kv_events.stored(keys[:placed])
        self.collector.onboard(now_ms - (r.parked_ms or now_ms))
        self.waiting.appendleft(r)

    def _park_for_onboarding(self, r: Request) -> bool:
        """At admission: if r's prefix continues in a lower tier, park it while it is copied up."""
        tiers = self.tiers
        if tiers is None or r.onboarded:
            return False
        matched = self._prefix_hit(r)[0]
        limit = (r.seq_len - 1) // self.block_size - (1 if self.spec.nextn else 0)
        g2, g3 = tiers.lookup(r.prompt_keys, matched, max(limit, 0) // self.unit)
        if not g2 and not g3:
            return False
        r.onboarded = True
        self.waiting.popleft()
        self._to_onboard.append((r, matched, g2, g3))
        self.collector.tier_hit(g2 * self.unit * self.block_size, g3 * self.unit * self.block_size)
        return True

    def _note_peak(self) -> None:
        """Track the most blocks ever in use (after a pass took its own, or a reservation)."""
        active = self.pool.num_active
        if active > self.max_active_blocks:
            self.max_active_blocks = active

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.decoders)

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.decoders or self.materialized)

    @property
    def active_blocks(self) -> int:
        return self.pool.num_active

    # ---- what the decode parts ask of the scheduler ----------------------------------------
    def _head_could_start(self) -> bool:
        """Whether a decode-only pass now could admit the waiting head (conservatively)."""
        if not self.waiting or self.num_running >= self.spec.max_num_seqs:
            return False
        r = self.waiting[0]
        return self.policy.admissible(self, r, self._prefix_hit(r)[1] * self.unit)

    def _promote_for_stretch(self, p: int) -> bool:
        """Before a decode-only stretch from pass p: admit the arrived prompts its first pass
        would; False when only that pass itself can tell (see
        :meth:`DecodeDestination.promote_for_stretch`)."""
        return DESTINATION.promote_for_stretch(self, p)

    def _stretch_booked(self, ends: array[float], start_ms: float) -> None:
        """A run of decode-only passes from ``start_ms`` to the last of ``ends`` was booked at
        once: what the scheduler's own state does over those passes (nothing, here)."""
        del ends, start_ms

    # ---- arrivals ------------------------------------------------------------------------
    def enqueue(self, r: Request, now_ms: float) -> bool:
        r.worker, r.rank = self.worker, self.rank
        r.enqueued_ms = now_ms
        if not self.policy.on_enqueue(self, r):
            r.rejected = True
            return False
        self.waiting.append(r)
        return True

    # ---- decode-phase bookkeeping --------------------------------------------------------
    def _start_decoding(self, r: Request, next_pass: int, *, first_single: bool = False) -> None:
        """r decodes from ``next_pass`` on (``first_single``: that step emits one token, even
        with speculative decoding)."""
        decoders = self.decoders
        # Running order is admission order (LIFO preemption takes the last): a prompt that
        # finishes after requests admitted later goes in ahead of them.
        later = []
        while decoders and next(reversed(decoders)) > r.admit_seq:
            later.append(decoders.popitem())
        decoders[r.admit_seq] = r
        for seq, other in reversed(later):
            decoders[seq] = other
        r.dec_pass0, r.dec_nc0, r.dec_gen0 = next_pass, r.num_computed, r.generated
        if self._bursts is not None:
            r.bursts = self._bursts.draw(r.max_output - r.generated, first_single=first_single)
        self.decoding.start(self, r, next_pass)

    def _materialize(self, r: Request, p: int) -> None:
        """Write a fast-path decoder's implicit state into its fields as of the start of pass p."""
        passes = p - r.dec_pass0
        done = self.ledger.done(r, passes)
        r.num_computed = r.dec_nc0 + done
        r.generated = r.dec_gen0 + done
        r.n_blocks = ceil_div(r.num_computed, self.block_size)
        if passes > 0:
            r.last_token_ms = self.pass_end(p - 1)
            if r.second_token_ms is None:
                second = second_token_pass(r, self.ledger)
                if second is not None and second < p:
                    r.second_token_ms = self.pass_end(second)

    def _stop_decoding(self, r: Request, p: int) -> None:
        """Take a decoder out of the aggregates at the start of pass p (before it is scheduled)."""
        del self.decoders[r.admit_seq]
        self.decoding.stop(self, r, p)

    # ---- KV ------------------------------------------------------------------------------
    def _release(self, r: Request, *, recompute: bool) -> None:
        full = r.num_computed // self.block_size
        run_key = None
        if recompute and full > r.n_keyed:
            run_key = own_run_key(r.rid, r.preemptions)
            r.run_start = r.n_keyed
        self.pool.release(
            r.prompt_keys[: r.n_keyed // self.unit],
            anon_full=full - r.n_keyed,
            anon_partial=r.n_blocks - full,
            run_key=run_key,
        )
        self.reserved_blocks -= r.final_blocks - r.n_blocks
        r.n_keyed = r.n_blocks = 0

    def _growth(self, r: Request, new_computed: int) -> tuple[list[int], int, int, int]:
        """How r's prefill grows to ``new_computed`` tokens: (units to name, anonymous blocks
        that those units absorb, anonymous blocks to add, available blocks consumed)."""
        bs, unit = self.block_size, self.unit
        total = ceil_div(new_computed, bs)
        first = r.n_keyed // unit
        last = (
            min(new_computed // bs // unit, len(r.prompt_keys)) if self.pool.enable_prefix_caching else first
        )
        names = r.prompt_keys[first:last] if last > first else []
        named_end = last * unit if names else r.n_keyed
        absorbed = min(r.n_blocks, named_end) - r.n_keyed if names else 0
        new_anon = total - named_end - (r.n_blocks - r.n_keyed - absorbed)
        cost = new_anon - absorbed
        if names:
            active = self.pool.active
            cost += unit * sum(1 for key in names if key not in active)
        return names, absorbed, new_anon, cost

    def _grow(
        self, r: Request, new_computed: int, plan: tuple[list[int], int, int, int] | None = None
    ) -> None:
        """Hold the blocks for r's first ``new_computed`` tokens: shareable full units by name,
        the others (its own, or a partly computed unit) anonymously."""
        names, absorbed, new_anon, _ = plan if plan is not None else self._growth(r, new_computed)
        pool = self.pool
        if names:
            pool.free_anon(absorbed)
            pool.acquire(names)
            r.n_keyed += len(names) * self.unit
        pool.allocate_anon(new_anon)
        total = ceil_div(new_computed, self.block_size)
        self.reserved_blocks -= total - r.n_blocks
        r.n_blocks = total

    def _newest_running(self) -> Request | None:
        if self.spec.preemption_mode == "fifo":
            if self.decoders:
                return next(iter(self.decoders.values()))
            return self.prefilling[0] if self.prefilling else None
        if self.prefilling:
            return self.prefilling[-1]
        return self.decoders[next(reversed(self.decoders))] if self.decoders else None

    def _preempt(self, victim: Request, p: int) -> None:
        if victim.admit_seq in self.decoders and self.decoders[victim.admit_seq] is victim:
            self._stop_decoding(victim, p)
        else:
            self.prefilling.remove(victim)
        self._release(victim, recompute=True)
        victim.num_computed = 0
        victim.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        self.preempted_in_pass = True

    def _make_room(self, blocks: int, p: int, current: Request | None = None) -> bool:
        """Preempt until ``blocks`` are available; False if ``current`` itself had to go."""
        while blocks > self.pool.available():
            victim = self._newest_running()
            if victim is None or not self.policy.may_preempt:
                raise AssertionError("KV pool exhausted with nothing to preempt")
            self._preempt(victim, p)
            if victim is current:
                return False
        return True

    def _prefix_hit(self, r: Request) -> tuple[int, int, int]:
        """(units matched, of them active, blocks of r's own run matched) for admitting r.

        The recompute rule caps the match so that at least the last block is computed even on a
        full hit; only a request that was preempted can hit its own run, right after its
        units."""
        limit = (r.seq_len - 1) // self.block_size
        if self.spec.nextn:
            limit = max(limit - 1, 0)  # the drafter needs the hidden states of one more block
        matched, hot = self.pool.match_prefix(r.prompt_keys, limit // self.unit)
        run = 0
        if r.preemptions and matched * self.unit == r.run_start:
            run = min(self.pool.cached_run(own_run_key(r.rid, r.preemptions - 1)), limit - r.run_start)
        return matched, hot, run

    # ---- the pass ------------------------------------------------------------------------
    def begin_pass(self, now_ms: float) -> float:
        """Schedule one pass starting at ``now_ms`` (mutating KV state); return its duration."""
        p = self.pass_idx
        self._now = now_ms
        back_to_back = self.async_admission and self._last_end_ms == now_ms
        self._admit_until_ms = self._last_start_ms if back_to_back else now_ms
        self._last_start_ms = now_ms
        self.preempted_in_pass = False
        budget = self.spec.max_num_batched_tokens
        budget, d, d_ctx = self.decoding.schedule(self, p, budget)

        # Most passes of a busy rank only decode: each step below is skipped when it has
        # nothing to do (the event loop runs one pass per rank per event).
        chunks: list[tuple[int, int, Request]] = []
        for r in list(self.prefilling) if self.prefilling else ():
            if r not in self.prefilling:
                continue  # preempted while an earlier request grew
            take = min(r.seq_len - r.num_computed, budget)
            if take <= 0:
                break
            plan = self._growth(r, r.num_computed + take)
            if not self._make_room(plan[3], p, r):
                break
            # Preemptions free blocks but never change r's own growth plan.
            self._grow(r, r.num_computed + take, plan)
            chunks.append((take, r.num_computed, r))
            r.num_computed += take
            budget -= take
        if (self.waiting or self.materialized) and not self.preempted_in_pass:
            if not chunks and d == 0:
                self._admit_until_ms = now_ms  # nothing else to run: an idle engine schedules at once
            budget, joined, joined_ctx = self._admit(p, budget, chunks)
            d += joined
            d_ctx += joined_ctx
        if chunks:
            self._completing = [r for _, _, r in chunks if r.num_computed == r.seq_len]

        self._note_peak()
        if self.role == "decode" and chunks:
            # A decode worker recomputing preempted requests is charged no prefill (the
            # reference prices none on decode workers); one whose recompute completes is
            # priced as a decoder.
            d += len(self._completing)
            d_ctx += sum(r.seq_len for r in self._completing)
            chunks = []
        if not chunks:
            # The decode batch is the requests decoding at the start of the pass (a request
            # whose prompt completes emits its first token without a decode step of its own),
            # and its KV load is their summed context, as the reference replay feeds its
            # timing model.
            return self._price(0, 0, 0.0, 0, d, d_ctx, d_ctx) if d else 0.0
        return self._price(*chunk_totals(chunks), d, d_ctx, d_ctx)

    def _price(
        self, tokens: int, requests: int, pairs: float, context: int, d: int, d_ctx: int, active_kv: int
    ) -> float:
        """The pass's duration (arguments in ``PerfModel.time_ms``'s order); its work and
        duration are kept as the latest pass record (what a planner reads)."""
        args = (
            tokens,
            requests,
            pairs,
            context,
            d,
            d_ctx,
            self.tokens_per_step,
            active_kv,
            self.capacity_tokens,
        )
        self.pass_args = args
        return self._record(self.perf.time_ms(*args), tokens, requests, d, d_ctx)

    def reprice(self, group_tokens: float, busiest_rank_tokens: float) -> float:
        """The latest pass priced again with its attention-DP group's tokens in this lock-step
        pass (``PerfModel.group_time_ms``); its duration."""
        args = self.pass_args
        ms = self.perf.group_time_ms(args, group_tokens, busiest_rank_tokens)
        return self._record(ms, int(args[0]), int(args[1]), int(args[4]), int(args[5]))

    def _record(self, ms: float, tokens: int, requests: int, d: int, d_ctx: int) -> float:
        if tokens and ms < self.eager_pass_floor_ms:
            ms = self.eager_pass_floor_ms
        self.last_pass = PassRecord(tokens, requests, d, d_ctx, ms)
        return ms

    def _admit(self, p: int, budget: int, chunks: list[tuple[int, int, Request]]) -> tuple[int, int, int]:
        """Admit waiting requests head-of-line into ``chunks``, and prompts whose KV arrived into
        the decode batch (see :mod:`destination`); return the budget left and the requests that
        joined the decode batch with their context this pass."""
        bs, spec = self.block_size, self.spec
        joined = joined_ctx = 0
        while self.num_running < spec.max_num_seqs:
            if DESTINATION.materialized_next(self):
                ctx = DESTINATION.join(self, p)
                if ctx is None:
                    break
                joined += 1
                joined_ctx += ctx
                if budget <= 0:
                    break  # it took no token, but a spent budget ends the admissions
                continue
            if not self.waiting or budget <= 0 or self.pending_destinations:
                break
            r = self.waiting[0]
            if r.enqueued_ms > self._admit_until_ms:
                break  # arrived after this pass was chosen
            if self._park_for_onboarding(r):
                continue
            seq_len = r.seq_len
            matched, hot, run = self._prefix_hit(r)
            cached = (matched * self.unit + run) * bs
            if not self.policy.admissible(self, r, hot * self.unit):
                break
            remaining = seq_len - cached
            if not spec.enable_chunked_prefill and remaining > budget:
                break
            take = min(remaining, budget)
            self.waiting.popleft()
            r.admit_seq = self._admissions
            self._admissions += 1
            self.reserved_blocks += r.final_blocks
            if cached:
                self._hold_hit(r, matched, run, cached)
            self._grow(r, cached + take)
            r.num_computed = cached + take
            self.prefilling.append(r)
            budget -= take
            self.collector.admission(r, cached, self._now)
            chunks.append((take, cached, r))
        return budget, joined, joined_ctx

    def _hold_hit(self, r: Request, matched: int, run: int, cached: int) -> None:
        """Hold an admitted request's cache hit: its matched units and its own run."""
        self.pool.acquire(r.prompt_keys[:matched])
        if run:
            self.pool.take_run(own_run_key(r.rid, r.preemptions - 1), run)
        r.n_keyed = matched * self.unit
        r.n_blocks = r.n_keyed + run
        r.num_computed = cached
        self.reserved_blocks -= r.n_blocks

    def pass_end(self, p: int) -> float:
        """When pass p ended (p at or after the oldest live decoder's first decode pass)."""
        return self.pass_end_ms[p - self.ends_from]

    def trim_pass_ends(self) -> None:
        """Forget the pass ends before the oldest live decoder's first decode pass (and before
        the latest pass, whose end the next one's token gap reads), once enough have piled up
        that the scan over the decoders is paid for."""
        if len(self.pass_end_ms) < self._trim_at:
            return
        keep = min((r.dec_pass0 for r in self.decoders.values()), default=self.pass_idx)
        keep = min(keep, self.pass_idx - 1)
        if keep > self.ends_from:
            del self.pass_end_ms[: keep - self.ends_from]
            self.ends_from = keep
        self._trim_at = len(self.pass_end_ms) + max(len(self.pass_end_ms), TRIM_PASSES)

    def end_pass(self, end_ms: float) -> list[Request]:
        """Stamp the pass's tokens at ``end_ms``; return the requests that finished."""
        p = self.pass_idx
        self.trim_pass_ends()
        self.pass_idx += 1
        self.pass_end_ms.append(end_ms)
        self._last_end_ms = end_ms
        finished: list[Request] = []
        self.decoding.emit(self, p, end_ms, finished)
        if self._completing:
            self._finish_prefills(p, end_ms, finished)
        return self._retire(finished, end_ms) if finished else finished

    def _finish_decoders(self, p: int, finished: list[Request]) -> None:
        """Fast path: decoders whose last token came out in pass p leave the aggregates."""
        bucket = self.finish_at.pop(p, ())
        if bucket:
            drop_finish_pass(self.finish_passes, p)
        for r in bucket:
            del self.decoders[r.admit_seq]
            self.ledger.finish(r, p)
            self._materialize(r, p + 1)
            self.dec_ctx -= r.num_computed  # the terminal token it emitted is never computed
            finished.append(r)

    def _finish_prefills(self, p: int, end_ms: float, finished: list[Request]) -> None:
        """The prompts completed by pass p (ending at ``end_ms``) emit a token and decode on."""
        lag = self.first_token_lag_passes
        for r in self._completing:
            if r not in self.prefilling:
                continue
            self.prefilling.remove(r)
            first = prompt_token(r, end_ms, self.collector, lag, end_ms - self._last_start_ms)
            if first and self.on_first_token is not None:
                self.on_first_token(r)
            if r.generated >= r.max_output:
                finished.append(r)
            else:
                r.num_computed = r.seq_len - 1  # the new token is dangling until scheduled
                self._start_decoding(r, p + 1)
        self._completing = []

    def _retire(self, finished: list[Request], end_ms: float) -> list[Request]:
        for r in finished:
            r.finish_ms = end_ms
            if self.role != "prefill":  # a prefill worker holds the KV until it is sent
                self._release(r, recompute=False)
            self.collector.finish(r)
        return finished

    def release_sent(self, r: Request) -> None:
        """Prefill role: the KV of a finished prompt has reached its decode worker."""
        self._release(r, recompute=False)


if TYPE_CHECKING:
    # The rank is the host its decode parts declare: one that lacks or retypes what they use
    # fails the type check here.
    _STRETCH_HOST: type[StretchHost] = Rank
    _DESTINATION_HOST: type[DestinationHost] = Rank
