"""Collecting what a replay measures, and the statistics over it.

Percentiles follow the reference replay: the sorted value at rank
``round_half_away((n - 1) * p / 100)`` (nearest rank, no interpolation). Token gaps (ITL) are
pooled over every consecutive pair of tokens of every completed request; the fast path records
the gaps of a pass's decoders as one weighted sample, so weighted statistics give exactly what
the expanded list would.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from aisimulate.rounding import round_half_away

if TYPE_CHECKING:
    from aisimulate.replay.request import Request

PERCENTILES = (("median", 50.0), ("p75", 75.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
BLOCK = 1 << 20  # elements a pass over a large sample handles at once: bounds its temporaries


def rank_of(n: int, p: float) -> int:
    return round_half_away((n - 1) * p / 100.0)


def distribution(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
    """mean, min, max, std and the nearest-rank percentiles of (optionally weighted) values."""
    if values.size == 0:
        return {}
    if weights is None:
        ordered = np.sort(values)
        n = ordered.size
        out = {
            "mean": float(ordered.mean()),
            "min": float(ordered[0]),
            "max": float(ordered[-1]),
            "std": float(ordered.std()),
        }
        for name, p in PERCENTILES:
            out[name] = float(ordered[rank_of(n, p)])
        return out
    return sorted_distribution(*sort_weighted(values.copy(), weights))


def sort_weighted(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values in ascending order, each with its weight (as float64, the statistics' operand):
    sorted once, read by several families. Sorts ``values`` in place, so that a sample of tens
    of millions of gaps is not held sorted and unsorted at once."""
    order = np.argsort(values)  # ties are equal values: their order cannot change a percentile
    ordered_weights = weights[order]
    del order
    values.sort()  # the values of values[order]: equal values are interchangeable
    return values, ordered_weights.astype(np.float64)


def reverse_in_place(a: np.ndarray) -> None:
    """Reverse a 1-D array with temporaries of at most :data:`BLOCK` elements."""
    lo, hi = 0, a.size
    while (half := min(BLOCK, (hi - lo) // 2)) > 0:
        front = a[lo : lo + half].copy()
        a[lo : lo + half] = a[hi - half : hi][::-1]
        a[hi - half : hi] = front[::-1]
        lo, hi = lo + half, hi - half


def reciprocal(ordered: np.ndarray, weights: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """``scale / value`` of the positive values of an ascending sample, ascending again: the
    reversed order, so the sample needs no second sort. Computed in place (a view of the
    sample's tail is returned): the sample is not read again."""
    first = int(np.searchsorted(ordered, 0.0, side="right"))
    values, tail_weights = ordered[first:], weights[first:]
    reverse_in_place(values)
    reverse_in_place(tail_weights)
    np.divide(scale, values, out=values)
    return values, tail_weights


def sorted_distribution(ordered: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    """:func:`distribution` of a weighted sample already in ascending order. Each temporary of
    the sample's size is dropped before the next is made."""
    if ordered.size == 0:
        return {}
    # Integer counts (float64 weights sum exactly below 2**53), accumulated in the weights' own
    # type: casting to int64 first would make one more copy of the sample.
    cumulative = np.cumsum(weights)
    n = int(cumulative[-1])
    at = [int(np.searchsorted(cumulative, rank_of(n, p), side="right")) for _, p in PERCENTILES]
    del cumulative
    w = np.ascontiguousarray(weights, dtype=np.float64)
    mean = float(np.dot(ordered, w) / n)
    spread = ordered - mean
    np.square(spread, out=spread)
    out = {
        "mean": mean,
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
        "std": float(math.sqrt(max(np.dot(spread, w) / n, 0.0))),
    }
    for (name, _), i in zip(PERCENTILES, at, strict=True):
        out[name] = float(ordered[i])
    return out


def add_family(
    summary: dict[str, float | str | None], name: str, stats: dict[str, float], unit: str = "_ms"
) -> None:
    for stat, value in stats.items():
        summary[f"{stat}_{name}{unit}"] = value


class Finished:
    """What the report reads of each finished request, as columns in finishing order: about 64
    bytes a request, where the request itself holds its spec and its prompt's block names (a
    flagship replay finishes hundreds of thousands)."""

    def __init__(self) -> None:
        self.arrival_ms = array("d")
        self.first_token_ms = array("d")
        self.second_token_ms = array("d")  # NaN when it emitted fewer than two tokens
        self.last_token_ms = array("d")
        self.input_tokens = array("q")
        self.output_tokens = array("q")
        self.max_reused_tokens = array("q")
        self.first_reused_tokens = array("q")

    def add(self, r: Request) -> None:
        assert r.first_token_ms is not None and r.last_token_ms is not None  # it emitted its tokens
        self.arrival_ms.append(r.arrival_ms)
        self.first_token_ms.append(r.first_token_ms)
        self.second_token_ms.append(math.nan if r.second_token_ms is None else r.second_token_ms)
        self.last_token_ms.append(r.last_token_ms)
        self.input_tokens.append(r.prompt_len)
        self.output_tokens.append(r.generated)
        self.max_reused_tokens.append(r.max_reused_tokens)
        self.first_reused_tokens.append(r.first_reused_tokens)

    def __len__(self) -> int:
        return len(self.arrival_ms)


class Collector:
    """Receives admissions, token gaps and finished requests from the ranks.

    ``on_admission`` lets a hidden collector (a prefill pool's) count admissions into the main one;
    ``keep_finished=False`` lets it forget the requests that finish there (their decode copies
    are the ones reported). Finished requests are kept as :class:`Finished` columns, and whole
    only with ``keep_requests`` (per-request records).
    """

    def __init__(
        self,
        *,
        on_admission: Callable[[int], None] | None = None,
        keep_finished: bool = True,
        keep_requests: bool = False,
    ) -> None:
        self._on_admission = on_admission
        self._keep_finished = keep_finished
        self._keep_requests = keep_requests
        self.transfer_ms: list[float] = []
        self.held_ms: list[float] = []
        self.onboard_ms: list[float] = []
        self.host_hit_tokens = 0
        self.disk_hit_tokens = 0
        self.tiers_enabled = False
        self.gap_ms = array("d")
        self.gap_weight = array("q")
        self.chunk_ends = array("d")  # stretches' pass ends, back to back
        self.chunk_lengths: list[int] = []
        self.chunk_weights: list[int] = []  # each stretch's decoders
        self.done = Finished()
        self.finished: list[Request] = []  # with keep_requests only
        self.rejected: list[Request] = []
        self.committed_prefill_tokens = 0
        self.emitted_tokens = 0
        self.decode_steps = 0
        self.decode_step_tokens = 0

    def admission(self, r: Request, cached_tokens: int, now_ms: float) -> None:
        if r.first_admit_ms is None:
            r.first_admit_ms = now_ms
            r.first_reused_tokens = cached_tokens
        r.max_reused_tokens = max(r.max_reused_tokens, cached_tokens)
        self.admission_counted(r.seq_len)
        if self._on_admission is not None:
            self._on_admission(r.seq_len)

    def admission_counted(self, tokens: int) -> None:
        self.committed_prefill_tokens += tokens

    def transfer(self, ms: float) -> None:
        self.transfer_ms.append(ms)

    def onboard(self, ms: float) -> None:
        """A parked request's lower-tier KV arrived after ``ms``."""
        self.onboard_ms.append(ms)

    def tier_hit(self, host_tokens: int, disk_tokens: int) -> None:
        self.host_hit_tokens += host_tokens
        self.disk_hit_tokens += disk_tokens

    def held(self, ms: float) -> None:
        """A request waited ``ms`` in the router's admission queue."""
        self.held_ms.append(ms)

    def gap(self, gap_ms: float, weight: int) -> None:
        self.gap_ms.append(gap_ms)
        self.gap_weight.append(weight)
        self.emitted_tokens += weight

    def decode_step(self, tokens: int, steps: int = 1) -> None:
        """Decoders' ``steps`` steps emitted ``tokens`` (more than one a step with speculative
        decoding)."""
        self.decode_steps += steps
        self.decode_step_tokens += tokens

    def gaps(self, ends_ms: array[float], weight: int) -> None:
        """The same ``weight`` decoders' gaps between consecutive pass ends (a stretch's passes:
        kept as given, differenced once for all in :meth:`take_gaps`)."""
        self.chunk_ends.extend(ends_ms)
        self.chunk_lengths.append(len(ends_ms))
        self.chunk_weights.append(weight)
        self.emitted_tokens += weight * (len(ends_ms) - 1)

    def take_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap values, weights) of every recorded token gap, handed over once: the collector
        forgets them, so that the report does not hold them twice (a flagship replay records
        tens of millions). Weights are int32 unless one needs more."""
        singles = np.frombuffer(self.gap_ms, dtype=np.float64)
        ends = np.frombuffer(self.chunk_ends, dtype=np.float64)
        lengths = np.asarray(self.chunk_lengths, dtype=np.int64)
        # Differences within each chunk only: drop those across a boundary between two.
        within = np.ones(max(len(ends) - 1, 0), dtype=bool)
        within[np.cumsum(lengths)[:-1] - 1] = False
        values = np.empty(len(singles) + int(np.count_nonzero(within)))
        values[: len(singles)] = singles
        at = len(singles)
        for lo in range(0, len(within), BLOCK):
            keep = within[lo : lo + BLOCK]
            step = ends[lo + 1 : lo + 1 + len(keep)] - ends[lo : lo + len(keep)]
            taken = int(np.count_nonzero(keep))
            np.compress(keep, step, out=values[at : at + taken])
            at += taken
        del singles, ends, within
        self.gap_ms, self.chunk_ends = array("d"), array("d")
        single_weights = np.frombuffer(self.gap_weight, dtype=np.int64)
        largest = max(int(single_weights.max(initial=0)), max(self.chunk_weights, default=0))
        dtype = np.int32 if largest < 2**31 else np.int64
        chunked = np.repeat(np.asarray(self.chunk_weights, dtype=dtype), lengths - 1)
        weights = np.concatenate([single_weights.astype(dtype), chunked])
        del single_weights
        self.gap_weight, self.chunk_lengths, self.chunk_weights = array("q"), [], []
        return values, weights

    def finish(self, r: Request) -> None:
        if self._keep_finished:
            self.done.add(r)
            if self._keep_requests:
                self.finished.append(r)

    def reject(self, r: Request) -> None:
        r.rejected = True
        self.rejected.append(r)
