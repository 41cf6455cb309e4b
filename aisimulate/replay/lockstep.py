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
* the window's end, where every rank is booked and the next window planned.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.request import Request

# Passes planned at once. New work on a rank reprices the rest of the window on that rank, so a
# shorter window wastes less pricing on hand-offs; a longer one plans less often.
WINDOW_PASSES = 32


class Lane:
    """One rank's part of a window: its pass durations from window pass ``first`` on, the
    window passes in which its decoders complete, and how far it is booked."""

    __slots__ = ("booked", "finishes", "first", "next_finish", "times")

    def __init__(self, first: int, times: list[float], finishes: list[int]) -> None:
        self.first = first
        self.times = times
        self.finishes = [first + f for f in finishes]
        self.next_finish = 0  # index into finishes of the next one not yet published
        self.booked = first  # window passes before this are booked on the rank

    def upcoming(self) -> int:
        """The window pass of the lane's next completion not yet published (past the window's
        end when none is)."""
        finishes, i = self.finishes, self.next_finish
        return finishes[i] if i < len(finishes) else 1 << 62

    @property
    def end(self) -> int:
        """The window pass after the lane's last."""
        return self.first + len(self.times)


class Window:
    """Decode-only passes of a worker's ranks from ``bounds[0]``: window pass k runs from
    ``bounds[k]`` to ``bounds[k + 1]``. Passes before ``pos`` have ended and been settled."""

    def __init__(self, ranks: list[Rank], start_ms: float, passes: int) -> None:
        self.ranks = ranks
        self.lanes: list[Lane | None] = [None] * len(ranks)
        self.durations = np.zeros((len(ranks), passes))
        self.bounds = np.full(passes + 1, start_ms)
        self.passes = passes
        self.pos = 0
        self.stop = 0  # the boundary of the worker's next event
        self.dirty: set[int] = set()  # ranks to price again at the next boundary

    def price(self, i: int) -> bool:
        """Price rank i's passes from ``pos`` (it is booked up to there and ready to decode);
        the window ends before a pass the rank finds no blocks for. False when that is the very
        next pass: it must be stepped."""
        times, finishes, short = self.ranks[i].stretch_times(self.passes - self.pos)
        if short and not times:
            return False
        lane = self.lanes[i] = Lane(self.pos, times, finishes)
        row = self.durations[i]
        row[self.pos :] = 0.0
        row[self.pos : lane.end] = times
        if short:
            self.passes = lane.end
        return True

    def drop(self, i: int) -> None:
        """Rank i has no passes from ``pos`` on."""
        self.lanes[i] = None
        self.durations[i, self.pos :] = 0.0

    def lay_out(self, until_ms: float = float("inf")) -> float:
        """Pass ends from ``pos`` on (each pass the slowest rank's duration after the previous
        end, summed one by one as stepping would) and the worker's next event: the earliest
        completion, or the window's end. The window ends at the first pass that ends at or
        after ``until_ms`` (a timeline sample reads the booked state there). Returns the
        event's time."""
        pos, passes = self.pos, self.passes
        bounds = self.bounds
        bounds[pos + 1 : passes + 1] = self.durations[:, pos:passes].max(axis=0)
        np.add.accumulate(bounds[pos : passes + 1], out=bounds[pos : passes + 1])
        if until_ms != float("inf"):
            ended = int(bounds[pos + 1 : passes + 1].searchsorted(until_ms, side="left"))
            self.passes = passes = min(passes, pos + ended + 1)
        stop = passes
        for lane in self.lanes:
            if lane is not None:
                stop = min(stop, lane.upcoming() + 1)
        self.stop = stop
        return float(bounds[stop])

    def active_ahead(self) -> bool:
        """Whether any rank has passes from ``pos`` on."""
        return any(lane is not None and lane.end > self.pos for lane in self.lanes)

    def started(self, now_ms: float, busy: bool) -> int:
        """Window passes started by ``now_ms`` (a pass ending now has not been followed yet,
        unless the worker already began the next one: ``busy``)."""
        ended = int(self.bounds[1 : self.passes + 1].searchsorted(now_ms, side="left"))
        return max(ended + 1, self.pos + busy)

    def commit(self, i: int, upto: int) -> list[Request]:
        """Book rank i's passes before window pass ``upto``; return who finished."""
        lane = self.lanes[i]
        if lane is None:
            return []
        stop = min(upto, lane.end)
        if stop <= lane.booked:
            return []
        ends = array("d", self.bounds[lane.booked + 1 : stop + 1].tobytes())
        finished = self.ranks[i].commit_stretch(ends, float(self.bounds[lane.booked]))
        lane.booked = stop
        if stop == lane.end:
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
