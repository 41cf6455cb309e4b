"""Measured GEMM latencies, interpolated per weight shape (``perf/data/kernel_tables.json``).

One smooth efficiency curve per GEMM dtype misses the measured kernels by 10-15% (median) across
the shapes a database measures: real kernels step with their tile configurations. The table keeps,
per system, backend and weight format, the fastest kernel's latency at a grid of token counts
(powers of two, 1 to 32,768) and weight shapes (n and k powers of two, 128 to 16,384, and 65,536):
``benchmarks/extract_kernel_points.py`` writes it from AIConfigurator 0.12's database
("Contains performance data from NVIDIA AIConfigurator, Apache-2.0").

A weight shape between nodes is interpolated bilinearly in (log n, log k) of the log latency: a
GEMM's work and bytes are products of its dimensions, so the log latency is close to linear in
their logs. Beyond the widest node the latency scales with the dimension (the work does); below
the narrowest it is the narrowest node's (launch-bound). A shape whose surrounding nodes were not
all measured (block-scaled kernels skip some) has no table latency and keeps the fit.

All-reduce: per system, backend and GPU count (2, 4, 8), the backend's custom all-reduce at every
message size measured (256 B to 1 GB), interpolated in (log bytes, log latency); beyond the
largest message the latency scales with the bytes, below the smallest it is the smallest's.

All-to-all (``perf/data/alltoall_tables.json``, ``benchmarks/extract_alltoall_tables.py``): per
system and GPU count (2, 4, 8; 2, 4 on the NVL72 systems), NCCL's all-to-all by each GPU's send
buffer, read the same way.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

DATA_FILE = "kernel_tables.json"
ALLTOALL_FILE = "alltoall_tables.json"
# Whether the expert all-to-all is read off its table when ``kernel_tables`` is not asked for
# (serving evidence in docs/perf.md).
ALLTOALL_TABLES_BY_DEFAULT = False


@dataclass(frozen=True, slots=True)
class GemmTable:
    """One (system, backend, weight format): latency_ms[i_m, i_n, i_k] at the grid's nodes."""

    m: tuple[float, ...]
    nk: tuple[float, ...]
    latency_ms: np.ndarray  # NaN where not measured

    def _axis(self, x: float) -> tuple[int, float, float]:
        """(lower node, weight of the upper node, factor beyond the widest node) along n or k."""
        grid = self.nk
        if x >= grid[-1]:
            return len(grid) - 2, 1.0, x / grid[-1]
        if x <= grid[0]:
            return 0, 0.0, 1.0
        i = bisect.bisect_right(grid, x) - 1
        w = math.log(x / grid[i]) / math.log(grid[i + 1] / grid[i])
        return i, w, 1.0

    def curve_ms(self, n: float, k: float) -> np.ndarray | None:
        """One (n x k) GEMM's latency at every token node; None where a corner is unmeasured
        below the largest token counts (those the grid skipped at its widest shapes continue
        the last measured segment's slope: large GEMMs are linear in tokens)."""
        i, wi, si = self._axis(n)
        j, wj, sj = self._axis(k)
        corners = np.log(self.latency_ms[:, i : i + 2, j : j + 2])
        weights = np.outer([1.0 - wi, wi], [1.0 - wj, wj])
        curve: np.ndarray = np.exp(np.einsum("mab,ab->m", corners, weights)) * si * sj
        measured = np.isfinite(curve)
        last = int(np.argmin(measured)) if not measured.all() else len(curve)
        if last < 2 or measured[last:].any():
            return None if last < len(curve) else curve
        m = np.asarray(self.m)
        slope = (curve[last - 1] - curve[last - 2]) / (m[last - 1] - m[last - 2])
        curve[last:] = curve[last - 1] + slope * (m[last:] - m[last - 1])
        return curve


@dataclass(frozen=True, slots=True)
class CollectiveTable:
    """One all-reduce (system, backend, GPU count): latency by message size, ascending."""

    message_bytes: tuple[float, ...]
    latency_ms: tuple[float, ...]

    def time_ms(self, message_bytes: np.ndarray) -> np.ndarray:
        x = np.log(np.maximum(message_bytes, self.message_bytes[0]))
        log_ms = np.interp(x, np.log(self.message_bytes), np.log(self.latency_ms))
        beyond = np.maximum(np.asarray(message_bytes, dtype=np.float64) / self.message_bytes[-1], 1.0)
        times: np.ndarray = np.exp(log_ms) * beyond
        return times


@functools.cache
def _data() -> dict[str, Any]:
    path = resources.files("aisimulate.perf") / "data" / DATA_FILE
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def table_from(data: dict[str, Any], values: list[float | None]) -> GemmTable:
    """A table from the data file's grid and one flat list of node latencies."""
    m, nk = tuple(float(x) for x in data["m"]), tuple(float(x) for x in data["nk"])
    flat = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return GemmTable(m, nk, flat.reshape(len(m), len(nk), len(nk)))


@functools.cache
def gemm_tables_for(system: str, backend: str, kernel_backend: str) -> dict[str, GemmTable]:
    """Tables by weight format measured on ``system`` with ``backend``'s kernels (else the
    backend whose kernel fits it borrows); empty for a system the database lacks."""
    data = _data()
    by_key = data["latency_ms"]
    entry = by_key.get(f"{system}/{backend}") or by_key.get(f"{system}/{kernel_backend}") or {}
    return {dtype: table_from(data, values) for dtype, values in entry.items()}


def token_nodes() -> tuple[float, ...]:
    """The token counts the tables are summed at into a pass's curves."""
    return tuple(float(x) for x in _data()["m"])


@functools.cache
def allreduce_tables_for(system: str, backend: str, kernel_backend: str) -> dict[int, CollectiveTable]:
    """All-reduce tables by GPU count measured on ``system`` with ``backend`` (else the backend
    whose kernel fits it borrows); empty for a system the database lacks."""
    by_key = _data().get("allreduce", {})
    entry = by_key.get(f"{system}/{backend}") or by_key.get(f"{system}/{kernel_backend}") or {}
    return {
        int(gpus): CollectiveTable(tuple(t["message_bytes"]), tuple(t["latency_ms"]))
        for gpus, t in entry.items()
    }


@functools.cache
def alltoall_tables_for(system: str) -> dict[int, CollectiveTable]:
    """NCCL all-to-all tables by GPU count measured on ``system``; empty for a system without."""
    path = resources.files("aisimulate.perf") / "data" / ALLTOALL_FILE
    entry = json.loads(path.read_text())["alltoall"].get(system, {})
    return {
        int(gpus): CollectiveTable(tuple(t["message_bytes"]), tuple(t["latency_ms"]))
        for gpus, t in entry.items()
    }
