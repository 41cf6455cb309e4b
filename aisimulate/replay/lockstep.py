"""A worker's decode-only passes planned ahead across its lock-step ranks.

Stepping a worker costs a scheduling and booking round per rank per pass, though a decode-only
pass changes nothing the ledger did not already know. A :class:`Window` prices a run of passes
on each rank (:meth:`DecodeStretches.times`: each rank's batch shrinks at the completions
its ledger holds) and lays them side by side: a worker pass lasts as long as its slowest rank
(ranks without work take no part), exactly as a stepped pass. The worker then needs an event
only where something happens:

* a completion: the completing ranks book their passes up to it and the requests are published
  at their own pass end; the other ranks stay unbooked (:meth:`Window.commit`);
* new work on a rank (arrived KV, a queued request): it takes effect at the next pass boundary,
  where only that rank is booked and priced again from there (:meth:`Worker.cut` moves the
  event, :meth:`Worker.begin` reprices);
* the end of the passes priced so far, where the ranks that reached it are priced further
  (:meth:`Window.extend`), or where the window closes: every rank is booked and the worker plans
  or steps its next pass afresh.

Each rank is priced lazily, up to its next completion (at most :data:`CHUNK_PASSES` ahead):
new work reprices a rank from the next boundary, so passes priced further ahead would mostly be
priced again. The passes are laid out in plain lists: a window holds a few passes per event,
too few for array calls to pay for themselves.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

from aisimulate.replay.stretch import STRETCHES

if TYPE_CHECKING:
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.request import Request
    from aisimulate.replay.stretch import PlannedRun

# The most passes a rank is priced ahead of its next completion.
CHUNK_PASSES = 64
# A rank left unbooked this many passes behind is booked when the window extends, which bounds
# the window's lists; passes every rank booked are dropped this many at a time.
MAX_UNBOOKED_PASSES = 8 * CHUNK_PASSES
# Past any pass of the window.
NEVER = 1 << 62


def next_run(rank: Rank) -> PlannedRun | None:
    """A rank's passes from its next one (booked up to there, ready to decode) up to its next
    completion; the run ends before a pass the rank finds no blocks for. None when that is the
    very next pass: it must be stepped."""
    run = STRETCHES.times(rank, CHUNK_PASSES, first_finish=True)
    return None if run.short and not run.times else run


class Lane:
    """One rank's part of a window: the durations of its priced passes, the window passes in
    which its decoders complete, how far it is booked, and where its run ends (to price it
    further)."""

    __slots__ = ("booked", "end", "finishes", "first", "next_at", "short", "tail", "times")

    def __init__(self, first: int, run: PlannedRun) -> None:
        self.booked = first  # window passes before this are booked on the rank
        self.first = first  # the window pass of times[0]
        self.end = first  # the window pass after the lane's last priced one
        self.times: list[float] = []
        self.finishes: list[int] = []  # completions not yet published, in order
        self.next_at = NEVER  # the first of them (past the window's end when none is)
        self.add(run)

    def add(self, run: PlannedRun) -> None:
        """Append a run priced from the lane's end."""
        end = self.end
        if run.finishes:
            self.finishes += [end + f for f in run.finishes]
            self.next_at = self.finishes[0]
        self.times += run.times
        self.end = end + len(run.times)
        self.short, self.tail = run.short, run.tail

    def publish(self) -> None:
        """Its next completion is published."""
        finishes = self.finishes
        del finishes[0]
        self.next_at = finishes[0] if finishes else NEVER

    def durations(self, pos: int, passes: int) -> list[float]:
        """Its pass durations from window pass ``pos`` to ``passes`` (0 past its end)."""
        steps = self.times[pos - self.first : passes - self.first]
        if len(steps) < passes - pos:
            steps += [0.0] * (passes - pos - len(steps))
        return steps

    def shift(self, passes: int, pos: int) -> None:
        """The window dropped its first ``passes`` passes (``pos`` the first not ended)."""
        del self.times[: pos - self.first]
        self.first = pos - passes
        self.booked -= passes
        self.end -= passes
        self.finishes = [f - passes for f in self.finishes]
        if self.finishes:
            self.next_at = self.finishes[0]


class Window:
    """Decode-only passes of a worker's ranks from ``bounds[0]``: window pass k runs from
    ``bounds[k]`` to ``bounds[k + 1]``. Passes are laid out up to ``passes``; those before
    ``pos`` have ended and been settled."""

    def __init__(self, ranks: list[Rank], start_ms: float) -> None:
        self.ranks = ranks
        self.lanes: list[Lane | None] = [None] * len(ranks)
        self.bounds = array("d", (start_ms,))
        self.passes = 0
        self.pos = 0
        self.stop = 0  # the boundary of the worker's next event
        self.cap = NEVER  # a timeline sample is due in this pass: the window closes after it
        self.dirty: set[int] = set()  # ranks to price again at the next boundary
        # The window closes at ``passes`` (a rank runs short of blocks there, or a timeline
        # sample is due).
        self.final = False

    def price(self, i: int, run: PlannedRun | None = None) -> bool:
        """Price rank i's passes from ``pos`` (it is booked up to there and ready to decode)
        unless ``run`` holds them (:func:`next_run`). False when its very next pass finds no
        blocks: it must be stepped."""
        if run is None and (run := next_run(self.ranks[i])) is None:
            return False
        self.lanes[i] = Lane(self.pos, run)
        return True

    def extend(self) -> bool:
        """At a boundary: the ranks whose priced passes end here are priced on to their next
        completion. False when such a rank's next pass finds no blocks (the window must
        close)."""
        pos, lanes = self.pos, self.lanes
        shift = pos
        for i, lane in enumerate(lanes):
            if lane is None:
                continue
            if lane.booked < pos - MAX_UNBOOKED_PASSES:
                self.commit(i, pos)
            elif lane.booked < shift:
                shift = lane.booked
            if lane.end > pos or lane.short or not lane.tail.decoders:
                continue
            rank = self.ranks[i]
            blocks = STRETCHES.blocks(rank, lane.end - lane.booked) if lane.end > lane.booked else 0
            run = STRETCHES.times(rank, CHUNK_PASSES, lane.tail, blocks, first_finish=True)
            if run.short and not run.times:
                return False
            lane.add(run)
        if shift >= MAX_UNBOOKED_PASSES:
            self._shift(shift)
        return True

    def _shift(self, passes: int) -> None:
        """Drop the first ``passes`` passes (every rank booked them)."""
        del self.bounds[:passes]
        for lane in self.lanes:
            if lane is not None:
                lane.shift(passes, self.pos)
        self.pos -= passes
        self.stop -= passes
        self.passes -= passes
        if self.cap != NEVER:
            self.cap -= passes

    def drop(self, i: int) -> None:
        """Rank i has no passes from ``pos`` on."""
        self.lanes[i] = None

    def lay_out(self, until_ms: float = float("inf")) -> float:
        """Pass ends from ``pos`` on (each pass the slowest rank's duration after the previous
        end, summed one by one as stepping would) up to the first rank's end of priced passes,
        and the worker's next event: the earliest completion, or that end. The window closes
        at the first pass that ends at or after ``until_ms`` (a timeline sample reads the booked
        state there). Returns the event's time."""
        pos, cap, bounds = self.pos, self.cap, self.bounds
        del bounds[pos + 1 :]
        if len(self.lanes) == 1:  # one rank: its passes as priced
            lane = self.lanes[0]
            if lane is None:
                passes, final, steps, stop = pos, False, [], NEVER
            else:
                passes, final, stop = lane.end, lane.short, lane.next_at + 1
                if cap <= passes:
                    passes, final = cap, True
                first = lane.first
                steps = lane.times[pos - first : passes - first]
        else:
            lanes = [lane for lane in self.lanes if lane is not None]
            passes, final, stop = NEVER, False, NEVER
            for lane in lanes:
                if lane.short:
                    if lane.end <= passes:
                        passes, final = lane.end, True
                elif lane.tail.decoders and lane.end < passes:
                    passes, final = lane.end, False
                if lane.next_at < stop:
                    stop = lane.next_at
            stop += 1
            if passes == NEVER:  # every rank's decoders finish in the passes priced
                passes = max([pos, *(lane.end for lane in lanes)])
            if cap <= passes:
                passes, final = cap, True
            if len(lanes) > 1:
                steps = list(map(max, *(lane.durations(pos, passes) for lane in lanes)))
            else:
                steps = lanes[0].durations(pos, passes) if lanes else [0.0] * (passes - pos)
        bounds.extend(accumulate(steps, initial=bounds.pop()))
        if until_ms < bounds[passes]:
            self.cap = passes = bisect_left(bounds, until_ms, pos + 1, passes + 1)
            final = True
        if stop > passes:
            stop = passes
        self.passes, self.final, self.stop = passes, final, stop
        return bounds[stop]

    def active_ahead(self) -> bool:
        """Whether any rank still decodes in the window (a rank whose decoders all finished
        leaves it)."""
        return self.lanes.count(None) < len(self.lanes)

    def ended(self, now_ms: float) -> int:
        """Window passes that ended by ``now_ms`` (their completions are published: each has an
        event at its end)."""
        return bisect_right(self.bounds, now_ms, 1, self.passes + 1) - 1

    def started(self, now_ms: float, busy: bool) -> int:
        """Window passes started by ``now_ms`` (a pass ending now has not been followed yet,
        unless the worker already began the next one: ``busy``)."""
        ended = bisect_left(self.bounds, now_ms, 1, self.passes + 1) - 1
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
        bounds, booked = self.bounds, lane.booked
        finished = STRETCHES.commit(self.ranks[i], bounds[booked + 1 : stop + 1], bounds[booked])
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
            if lane is not None and lane.next_at == stop - 1:
                lane.publish()
                finished += self.commit(i, stop)
        self.pos = stop
        return finished

    def unbooked_blocks(self, i: int, now_ms: float, busy: bool) -> int:
        """Blocks rank i's passes started by ``now_ms`` took but has not booked."""
        lane = self.lanes[i]
        if lane is None:
            return 0
        passes = min(self.started(now_ms, busy), lane.end) - lane.booked
        return STRETCHES.blocks(self.ranks[i], passes) if passes > 0 else 0

    def ahead_blocks(self, i: int) -> int:
        """Blocks rank i's priced passes not booked yet take (started or not)."""
        lane = self.lanes[i]
        if lane is None or lane.end <= lane.booked:
            return 0
        return STRETCHES.blocks(self.ranks[i], lane.end - lane.booked)

    def fits(self, i: int, ahead: int) -> bool:
        """Whether rank i still finds the blocks of its passes ahead (``ahead``:
        :meth:`ahead_blocks`) after a reservation."""
        if self.lanes[i] is None:
            return True
        rank = self.ranks[i]
        available = rank.pool.num_free if rank.stretch_keeps_cache else rank.pool.available()
        return ahead <= available
