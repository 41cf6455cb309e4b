"""A worker's decode-only passes planned ahead across its lock-step ranks.

Stepping a worker costs a scheduling and booking round per rank per pass, though a decode-only
pass changes nothing the ledger did not already know. A :class:`Window` prices a run of passes
on each rank (:meth:`DecodeStretches.stretch_times`: each rank's batch shrinks at the completions
its ledger holds) and lays them side by side: a worker pass lasts as long as its slowest rank
(ranks without work take no part), exactly as a stepped pass. The worker then needs an event
only where something happens:

* a completion: the completing ranks book their passes up to it and the requests are published
  at their own pass end; the other ranks stay unbooked (:meth:`Window.commit`);
* new work on a rank (arrived KV, a queued request): it takes effect at the next pass boundary,
  where only that rank is booked and priced again from there (:meth:`Worker.cut` moves the
  event, :meth:`Worker.begin` reprices);
* the end of the passes priced so far, where every rank's run is priced a chunk further
  (:meth:`Window.extend`), or where the window closes: every rank is booked and the worker plans
  or steps its next pass afresh.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.request import Request
    from aisimulate.replay.stretch import PlannedRun

# Passes priced at a time. New work on a rank reprices its run up to the end of the passes
# priced so far, so a short chunk wastes less pricing on hand-offs; but each chunk costs an
# event and a pricing call per rank (on the flagship replay 64 beat 16 and 256).
CHUNK_PASSES = 64
# A rank left unbooked this many passes behind is booked when the window extends, which bounds
# the window's arrays.
MAX_UNBOOKED_PASSES = 8 * CHUNK_PASSES


class Lane:
    """One rank's part of a window: where its priced passes end, the window passes in which its
    decoders complete, how far it is booked, and where its run ends (to price it further)."""

    __slots__ = ("booked", "end", "finishes", "next_finish", "short", "tail")

    def __init__(self, first: int, run: PlannedRun) -> None:
        self.booked = first  # window passes before this are booked on the rank
        self.end = first  # the window pass after the lane's last priced one
        self.finishes: list[int] = []
        self.next_finish = 0  # index into finishes of the next one not yet published
        self.add(run)

    def add(self, run: PlannedRun) -> None:
        """Append a run priced from the lane's end."""
        end = self.end
        self.finishes.extend(end + f for f in run.finishes)
        self.end = end + len(run.times)
        self.short, self.tail = run.short, run.tail

    def upcoming(self) -> int:
        """The window pass of the lane's next completion not yet published (past the window's
        end when none is)."""
        finishes, i = self.finishes, self.next_finish
        return finishes[i] if i < len(finishes) else 1 << 62

    def shift(self, passes: int) -> None:
        """The window dropped its first ``passes`` passes."""
        self.booked -= passes
        self.end -= passes
        self.finishes = [f - passes for f in self.finishes[self.next_finish :]]
        self.next_finish = 0


class Window:
    """Decode-only passes of a worker's ranks from ``bounds[0]``: window pass k runs from
    ``bounds[k]`` to ``bounds[k + 1]``. Passes are priced up to ``passes``; those before ``pos``
    have ended and been settled."""

    def __init__(self, ranks: list[Rank], start_ms: float) -> None:
        self.ranks = ranks
        self.lanes: list[Lane | None] = [None] * len(ranks)
        self.durations = np.zeros((len(ranks), CHUNK_PASSES))
        self.bounds = np.full(CHUNK_PASSES + 1, start_ms)
        self.passes = CHUNK_PASSES
        self.pos = 0
        self.stop = 0  # the boundary of the worker's next event
        self.dirty: set[int] = set()  # ranks to price again at the next boundary
        # The window closes at ``passes`` (a rank runs short of blocks there, or a timeline
        # sample is due).
        self.final = False

    def price(self, i: int) -> bool:
        """Price rank i's passes from ``pos`` (it is booked up to there and ready to decode);
        the window ends before a pass the rank finds no blocks for. False when that is the very
        next pass: it must be stepped."""
        run = self.ranks[i].stretch_times(self.passes - self.pos)
        if run.short and not run.times:
            return False
        lane = self.lanes[i] = Lane(self.pos, run)
        row = self.durations[i]
        row[self.pos :] = 0.0
        row[self.pos : lane.end] = run.times
        if run.short:
            self.passes, self.final = lane.end, True
        return True

    def extend(self) -> bool:
        """At the end of the priced passes: drop the passes every rank booked and price every
        rank's run a chunk further. False when a rank's next pass finds no blocks (the window
        must close)."""
        pos = self.pos
        for i, lane in enumerate(self.lanes):
            if lane is not None and lane.booked < pos - MAX_UNBOOKED_PASSES:
                self.commit(i, pos)
        lanes = [(i, lane) for i, lane in enumerate(self.lanes) if lane is not None]
        shift = min([pos, *(lane.booked for _, lane in lanes)])
        kept = pos - shift
        durations = np.zeros((len(self.ranks), kept + CHUNK_PASSES))
        durations[:, :kept] = self.durations[:, shift:pos]
        bounds = np.empty(kept + CHUNK_PASSES + 1)
        bounds[: kept + 1] = self.bounds[shift : pos + 1]
        self.durations, self.bounds = durations, bounds
        self.pos = self.stop = kept
        passes = kept + CHUNK_PASSES
        for _, lane in lanes:
            lane.shift(shift)
        for i, lane in lanes:
            rank = self.ranks[i]
            run = rank.stretch_times(CHUNK_PASSES, lane.tail, rank.stretch_blocks(lane.end - lane.booked))
            if run.short and not run.times:
                return False
            durations[i, lane.end : lane.end + len(run.times)] = run.times
            lane.add(run)
            if run.short:
                passes, self.final = min(passes, lane.end), True
        self.passes = passes
        return True

    def drop(self, i: int) -> None:
        """Rank i has no passes from ``pos`` on."""
        self.lanes[i] = None
        self.durations[i, self.pos :] = 0.0

    def lay_out(self, until_ms: float = float("inf")) -> float:
        """Pass ends from ``pos`` on (each pass the slowest rank's duration after the previous
        end, summed one by one as stepping would) and the worker's next event: the earliest
        completion, or the end of the priced passes. The window closes at the first pass that
        ends at or after ``until_ms`` (a timeline sample reads the booked state there). Returns
        the event's time."""
        pos, passes = self.pos, self.passes
        bounds = self.bounds
        bounds[pos + 1 : passes + 1] = self.durations[:, pos:passes].max(axis=0)
        np.add.accumulate(bounds[pos : passes + 1], out=bounds[pos : passes + 1])
        if until_ms < bounds[passes]:
            ended = int(bounds[pos + 1 : passes + 1].searchsorted(until_ms, side="left"))
            self.passes = passes = pos + ended + 1
            self.final = True
        stop = passes
        for lane in self.lanes:
            if lane is not None:
                stop = min(stop, lane.upcoming() + 1)
        self.stop = stop
        return float(bounds[stop])

    def active_ahead(self) -> bool:
        """Whether any rank still decodes in the window (a rank whose decoders all finished
        leaves it)."""
        return any(lane is not None for lane in self.lanes)

    def ended(self, now_ms: float) -> int:
        """Window passes that ended by ``now_ms`` (their completions are published: each has an
        event at its end)."""
        return int(self.bounds[1 : self.passes + 1].searchsorted(now_ms, side="right"))

    def started(self, now_ms: float, busy: bool) -> int:
        """Window passes started by ``now_ms`` (a pass ending now has not been followed yet,
        unless the worker already began the next one: ``busy``)."""
        ended = int(self.bounds[1 : self.passes + 1].searchsorted(now_ms, side="left"))
        return max(ended + 1, self.pos + busy)

    def commit(self, i: int, upto: int) -> list[Request]:
        """Book rank i's passes before window pass ``upto``; return who finished. A lane whose
        decoders all finished leaves the window."""
        lane = self.lanes[i]
        if lane is None:
            return []
        stop = min(upto, lane.end)
        if stop <= lane.booked:
            return []
        ends = array("d", self.bounds[lane.booked + 1 : stop + 1].tobytes())
        finished = self.ranks[i].commit_stretch(ends, float(self.bounds[lane.booked]))
        lane.booked = stop
        if stop == lane.end and not lane.tail.decoders:
            self.lanes[i] = None
        return finished

    def settle(self) -> list[Request]:
        """The worker reached ``stop``: the ranks completing in the pass that ended book up to
        it; return who finished."""
        stop = self.stop
        finished: list[Request] = []
        for i, lane in enumerate(self.lanes):
            if lane is not None and lane.upcoming() == stop - 1:
                lane.next_finish += 1
                finished.extend(self.commit(i, stop))
        self.pos = stop
        return finished

    def unbooked_blocks(self, i: int, now_ms: float, busy: bool) -> int:
        """Blocks rank i's passes started by ``now_ms`` took but has not booked."""
        lane = self.lanes[i]
        if lane is None:
            return 0
        passes = min(self.started(now_ms, busy), lane.end) - lane.booked
        return self.ranks[i].stretch_blocks(passes) if passes > 0 else 0

    def fits(self, i: int) -> bool:
        """Whether rank i still finds the blocks of its passes ahead (after a reservation)."""
        lane = self.lanes[i]
        if lane is None:
            return True
        rank = self.ranks[i]
        available = rank.pool.num_free if rank.stretch_keeps_cache else rank.pool.available()
        return rank.stretch_blocks(lane.end - lane.booked) <= available
