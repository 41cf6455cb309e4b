"""Measured attention latencies, interpolated per head size (``perf/data/attention_tables.json``).

One fitted efficiency per system misses the measured attention kernels by 10-25% (median) across
the shapes a database measures: prefill kernels step with their query tiles, decode kernels with
their KV splits. The tables keep, per system, backend, head size and KV format, one layer's
latency at powers of two of the kernel's parallel width (requests x query heads in prefill,
sequences x KV heads in decode) and at every prompt or KV length measured:
``benchmarks/extract_attention_tables.py`` writes them from AIConfigurator 0.12's database
("Contains performance data from NVIDIA AIConfigurator, Apache-2.0").

A pass carries its prefill as totals (new tokens, causal (query, key) pairs, requests), not the
chunk lengths: the table is read at the equal chunks with the same tokens and pairs (length
``2 pairs / tokens - 1``, as many chunks as fill the tokens), which is exact for equal chunks and
keeps the pairs (the compute) for unequal ones; a cached prefix lengthens the chunks' key span.
Decode is read at the batch's mean context. Interpolation is bilinear in (log width, log length)
of the log latency; beyond the widest width (or the widest measured at a length) the latency
scales with the width, beyond the longest length with the pairs (prefill) or the KV read
(decode); below the narrowest it is the narrowest's (launch-bound).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

DATA_FILE = "attention_tables.json.gz"
# Which phases' tables price a pass when ``kernel_tables`` is not asked for (serving evidence in
# docs/perf.md).
ATTENTION_TABLES_BY_DEFAULT: frozenset[str] = frozenset()
# The MLA the database measured (DeepSeek-V3's): latent rank, no-rope and rope query/key head
# dims, value head dim. Other MLA geometries keep the fits.
MLA_GEOMETRY = (512, 128, 64, 128)


def _bracket(nodes: tuple[float, ...], x: float) -> tuple[int, float, float]:
    """The interval ``i`` of sorted log nodes that holds ``x``, ``x``'s weight towards node
    ``i + 1``, and how far ``x`` lies past the last node: the table extrapolates beyond its
    largest node along a power law, and clamps below its smallest."""
    if x >= nodes[-1]:
        return len(nodes) - 2, 1.0, x - nodes[-1]
    if x <= nodes[0]:
        return 0, 0.0, 0.0
    i = bisect.bisect_right(nodes, x) - 1
    return i, (x - nodes[i]) / (nodes[i + 1] - nodes[i]), 0.0


@dataclass(frozen=True, slots=True)
class AttentionTable:
    """One (system, backend, phase, head size, KV format): log latency at (width, length) nodes,
    unmeasured nodes filled (wider: linear in width; narrower: the narrowest measured)."""

    log_width: tuple[float, ...]
    log_length: tuple[float, ...]
    log_ms: tuple[tuple[float, ...], ...]  # [width][length]
    length_power: float  # how the latency grows beyond the longest length (2: prefill, 1: decode)

    def time_ms(self, width: float, length: float) -> float:
        """One layer's latency at ``width`` (> 0) and ``length`` (> 0)."""
        i, wi, beyond = _bracket(self.log_width, math.log(width))
        j, wj, past = _bracket(self.log_length, math.log(length))
        beyond += self.length_power * past
        lo, hi = self.log_ms[i], self.log_ms[i + 1]
        low = lo[j] + wj * (lo[j + 1] - lo[j])
        high = hi[j] + wj * (hi[j + 1] - hi[j])
        return math.exp(low + wi * (high - low) + beyond)

    def log_row(self, width: float) -> np.ndarray:
        """The log latency at every length node for one ``width`` (as ``time_ms`` reads it)."""
        i, wi, beyond = _bracket(self.log_width, math.log(width))
        lo, hi = np.asarray(self.log_ms[i]), np.asarray(self.log_ms[i + 1])
        row: np.ndarray = lo + wi * (hi - lo) + beyond
        return row

    def over_lengths(self, width: float, lengths: np.ndarray) -> np.ndarray:
        """``time_ms`` at one ``width`` and many lengths (> 0), in one pass over them."""
        y = np.log(lengths)
        ll = np.asarray(self.log_length)
        log_ms = np.interp(y, ll, self.log_row(width)) + self.length_power * np.maximum(y - ll[-1], 0.0)
        times: np.ndarray = np.exp(log_ms)
        return times

    def without_width(self, width: float) -> AttentionTable:
        """The table without the node at ``width`` (a held-out check); itself if none is there."""
        x = math.log(width)
        keep = [i for i, w in enumerate(self.log_width) if abs(w - x) > 1e-9]
        if len(keep) == len(self.log_width) or len(keep) < 2:
            return self
        return AttentionTable(
            tuple(self.log_width[i] for i in keep),
            self.log_length,
            tuple(self.log_ms[i] for i in keep),
            self.length_power,
        )


def table_from(widths: list[float], entry: dict[str, Any], length_power: float) -> AttentionTable | None:
    """A table from the data file's grid (``log2_ns_x100``: round(100 log2(latency in ns)), 0
    where not measured, rows from ``first_width`` up), filling the nodes the database did not
    measure; None where a length has no measurement at all."""
    first = widths.index(entry["first_width"])
    coded = np.asarray(entry["log2_ns_x100"], dtype=np.float64)
    grid = np.where(coded > 0, np.exp2(coded / 100.0) / 1e6, np.nan)
    width = widths[first : first + len(grid)]
    w = np.asarray(width, dtype=np.float64)
    for j in range(grid.shape[1]):
        measured = np.flatnonzero(np.isfinite(grid[:, j]))
        if not len(measured):
            return None
        lo, last = measured[0], measured[-1]
        grid[:lo, j] = grid[lo, j]
        grid[last + 1 :, j] = grid[last, j] * w[last + 1 :] / w[last]
        inner = np.arange(lo, last + 1)
        holes = inner[~np.isfinite(grid[inner, j])]
        if len(holes):
            grid[holes, j] = np.exp(
                np.interp(np.log(w[holes]), np.log(w[measured]), np.log(grid[measured, j]))
            )
    return AttentionTable(
        tuple(math.log(x) for x in width),
        tuple(math.log(x) for x in entry["length"]),
        tuple(tuple(float(v) for v in row) for row in np.log(grid)),
        length_power,
    )


@functools.cache
def _data() -> dict[str, Any]:
    path = resources.files("aisimulate.perf") / "data" / DATA_FILE
    data: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return data


@functools.cache
def attention_table_for(
    system: str, backend: str, kernel_backend: str, phase: str, shape: str
) -> AttentionTable | None:
    """One table measured on ``system`` with ``backend``'s kernels (else the backend whose kernel
    fits it borrows); None where the database has none. ``phase``: "context" or "generation"
    (``shape`` "<head_dim>/<kv>"), "context_mla" (``shape`` "<kv>") or "generation_mla"
    (``shape`` "<heads per GPU>/<kv>"); ``kv_key`` names the KV format."""
    data = _data()
    by_key = data[phase]
    entry = by_key.get(f"{system}/{backend}") or by_key.get(f"{system}/{kernel_backend}") or {}
    if shape not in entry:
        return None
    return table_from(data["width"], entry[shape], 2.0 if phase.startswith("context") else 1.0)


def kv_key(kv_dtype: str) -> str:
    """The table's name of a KV format (fp16 caches read as bf16)."""
    return "bf16" if kv_dtype == "fp16" else kv_dtype


def equal_chunks(pairs: float, new_tokens: float) -> tuple[float, float]:
    """(chunks, length) of the equal causal chunks with these new tokens and pairs."""
    length = max(2.0 * pairs / new_tokens - 1.0, 1.0)
    return new_tokens / length, length


@dataclass(frozen=True, slots=True)
class TableContextAttention:
    """Prefill attention of a pass from the measured table (same call as ``ContextAttention``);
    sliding-window layers read at their window."""

    table: AttentionTable
    num_layers: float
    heads: float
    num_sliding_layers: float = 0.0
    sliding_window: float = 0.0

    def scalar(self) -> Callable[[float, float, float, float], float]:
        table, layers, heads = self.table.time_ms, self.num_layers, self.heads
        sliding, window = self.num_sliding_layers, self.sliding_window

        def time_ms(pairs: float, requests: float, context_tokens: float, new_tokens: float) -> float:
            if requests <= 0 or new_tokens <= 0:
                return 0.0
            chunks, length = equal_chunks(pairs, new_tokens)
            busy = layers * table(chunks * heads, length)
            if sliding:
                span = length if length < window else window
                busy += sliding * table(new_tokens / span * heads, span)
            return busy

        return time_ms

    def time_ms(self, pairs: Any, requests: Any, context_tokens: Any, new_tokens: Any) -> Any:
        one = self.scalar()
        arrays = np.broadcast_arrays(
            *(np.asarray(x, dtype=np.float64) for x in (pairs, requests, context_tokens, new_tokens))
        )
        return np.vectorize(one, otypes=[np.float64])(*arrays)


@dataclass(frozen=True, slots=True)
class TableGenerationAttention:
    """Decode attention of a pass from the measured table at the batch's mean context (same call
    as ``GenerationAttention``). A step's extra query tokens (speculative verification) share the
    KV read the table measured at one; sliding-window layers read at most their window."""

    table: AttentionTable
    num_layers: float
    kv_heads: float
    num_sliding_layers: float = 0.0
    sliding_window: float = 0.0

    def scalar(self) -> Callable[[float, float, float], float]:
        table, layers, kv_heads = self.table.time_ms, self.num_layers, self.kv_heads
        sliding, window = self.num_sliding_layers, self.sliding_window

        def time_ms(sequences: float, context_tokens: float, tokens_per_step: float) -> float:
            if sequences <= 0:
                return 0.0
            width = sequences * kv_heads
            length = context_tokens / sequences if context_tokens > sequences else 1.0
            busy = layers * table(width, length)
            if sliding:
                busy += sliding * table(width, length if length < window else window)
            return busy

        return time_ms

    def time_ms(self, sequences: Any, context_tokens: Any, tokens_per_step: Any) -> Any:
        one = self.scalar()
        arrays = np.broadcast_arrays(
            *(np.asarray(x, dtype=np.float64) for x in (sequences, context_tokens, tokens_per_step))
        )
        return np.vectorize(one, otypes=[np.float64])(*arrays)

    def over_contexts(
        self, sequences: float, context_tokens: np.ndarray, tokens_per_step: float
    ) -> np.ndarray:
        """``time_ms`` of one batch (``sequences`` > 0) at many summed contexts: a decode
        stretch's one per-pass term, one table row read at every mean context."""
        contexts = np.asarray(context_tokens, dtype=np.float64)
        width = sequences * self.kv_heads
        lengths = np.where(contexts > sequences, contexts / sequences, 1.0)
        times: np.ndarray = self.num_layers * self.table.over_lengths(width, lengths)
        if self.num_sliding_layers:
            windowed = np.minimum(lengths, self.sliding_window)
            times = times + self.num_sliding_layers * self.table.over_lengths(width, windowed)
        return times
