"""Latency from a user's measured table, interpolated as the reference replay does.

Prefill time is linear in ``x = total new tokens`` between measured points (and extrapolated
linearly past them); decode time is bilinear in (active KV tokens, mean context length).

Two file formats:

* NPZ with arrays ``prefill_isl``, ``prefill_ttft_ms`` (1-D) and ``decode_active_kv_tokens``,
  ``decode_context_length`` (1-D) with ``decode_itl`` of shape (active, context), as Dynamo's
  profiler writes;
* CSV with header ``phase,tokens,active_kv_tokens,context_length,latency_ms``: ``prefill`` rows
  give ``tokens``; ``decode`` rows give both grid coordinates and must fill the whole grid.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np

from aisimulate.errors import ConfigError
from aisimulate.perf.model import BatchArrays, BatchShape, PassBreakdown, SpelledOutDecodeTimes
from aisimulate.perf.polynomial import DECODE_FLOOR_MS


class _Axis:
    """A sorted axis with the bracketing index and weight of a query, extrapolating at the ends."""

    def __init__(self, values: np.ndarray, where: str) -> None:
        if values.ndim != 1 or values.size == 0 or np.any(np.diff(values) <= 0):
            raise ConfigError("axis must be 1-D, non-empty and strictly increasing", where=where)
        self.values = values.astype(np.float64)
        self.points = self.values.tolist()

    def bracket(self, q: float) -> tuple[int, float]:
        pts = self.points
        if len(pts) == 1:
            return 0, 0.0
        i = min(max(bisect.bisect_right(pts, q) - 1, 0), len(pts) - 2)
        return i, (q - pts[i]) / (pts[i + 1] - pts[i])

    def brackets(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v = self.values
        if v.size == 1:
            return np.zeros(q.shape, dtype=np.intp), np.zeros(q.shape)
        i = np.clip(np.searchsorted(v, q, side="right") - 1, 0, v.size - 2)
        return i, (q - v[i]) / (v[i + 1] - v[i])


class TablePerfModel(SpelledOutDecodeTimes):
    """Interpolates measured prefill and decode latencies."""

    name = "table"

    def __init__(
        self,
        prefill_tokens: np.ndarray,
        prefill_ms: np.ndarray,
        decode_active_kv_tokens: np.ndarray,
        decode_context_length: np.ndarray,
        decode_ms: np.ndarray,
        *,
        source: str = "table",
    ) -> None:
        self.source = source
        self._prefill_x = _Axis(np.asarray(prefill_tokens), f"{source}: prefill_isl")
        self._prefill_y = np.asarray(prefill_ms, dtype=np.float64)
        self._active = _Axis(np.asarray(decode_active_kv_tokens), f"{source}: decode_active_kv_tokens")
        self._context = _Axis(np.asarray(decode_context_length), f"{source}: decode_context_length")
        grid = np.asarray(decode_ms, dtype=np.float64)
        if grid.shape != (self._active.values.size, self._context.values.size):
            raise ConfigError(
                f"decode_itl must have shape (active, context) = "
                f"({self._active.values.size}, {self._context.values.size}), got {grid.shape}",
                where=source,
            )
        if self._prefill_y.shape != self._prefill_x.values.shape:
            raise ConfigError("prefill_ttft_ms must have one value per prefill_isl", where=source)
        self._grid = grid
        self._grid_rows: list[list[float]] = grid.tolist()
        self._prefill_list: list[float] = self._prefill_y.tolist()

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path) -> TablePerfModel:
        path = Path(path)
        if not path.is_file():
            raise ConfigError("perf table file not found", where=str(path))
        if path.suffix == ".npz":
            return cls._from_npz(path)
        if path.suffix == ".csv":
            return cls._from_csv(path)
        raise ConfigError("perf table must be a .csv or .npz file", where=str(path))

    @classmethod
    def _from_npz(cls, path: Path) -> TablePerfModel:
        keys = (
            "prefill_isl",
            "prefill_ttft_ms",
            "decode_active_kv_tokens",
            "decode_context_length",
            "decode_itl",
        )
        try:
            data = np.load(path)
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read NPZ: {err}", where=str(path)) from None
        missing = [k for k in keys if k not in data]
        if missing:
            raise ConfigError(f"missing arrays {', '.join(missing)}", where=str(path))
        return cls(*(data[k] for k in keys), source=str(path))

    @classmethod
    def _from_csv(cls, path: Path) -> TablePerfModel:
        prefill: dict[float, float] = {}
        decode: dict[tuple[float, float], float] = {}
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            need = {"phase", "tokens", "active_kv_tokens", "context_length", "latency_ms"}
            if not reader.fieldnames or not need <= set(reader.fieldnames):
                raise ConfigError(f"CSV header must contain {', '.join(sorted(need))}", where=f"{path}:1")
            for line, row in enumerate(reader, start=2):
                where = f"{path}:{line}"
                try:
                    latency = float(row["latency_ms"])
                    if row["phase"] == "prefill":
                        prefill[float(row["tokens"])] = latency
                    elif row["phase"] == "decode":
                        decode[(float(row["active_kv_tokens"]), float(row["context_length"]))] = latency
                    else:
                        raise ConfigError(
                            f"phase must be prefill or decode, got {row['phase']!r}", where=where
                        )
                except (TypeError, ValueError) as err:
                    if isinstance(err, ConfigError):
                        raise
                    raise ConfigError(f"bad number: {err}", where=where) from None
                if latency < 0:
                    raise ConfigError(f"latency_ms must be >= 0, got {latency}", where=where)
        if not prefill or not decode:
            raise ConfigError("CSV needs at least one prefill row and one decode row", where=str(path))
        active = sorted({a for a, _ in decode})
        context = sorted({c for _, c in decode})
        missing = [(a, c) for a in active for c in context if (a, c) not in decode]
        if missing:
            a, c = missing[0]
            raise ConfigError(
                f"decode rows must fill the grid; missing active_kv_tokens={a:g}, context_length={c:g}",
                where=str(path),
            )
        xs = sorted(prefill)
        grid = [[decode[(a, c)] for c in context] for a in active]
        return cls(
            np.array(xs),
            np.array([prefill[x] for x in xs]),
            np.array(active),
            np.array(context),
            np.array(grid),
            source=str(path),
        )

    # ---- evaluation ----------------------------------------------------------------------
    def _prefill(self, tokens: float) -> float:
        if tokens <= 0:
            return 0.0
        i, t = self._prefill_x.bracket(tokens)
        y = self._prefill_list
        return y[i] + t * (y[i + 1] - y[i]) if len(y) > 1 else y[0]

    def _decode(self, active: float, context: float) -> float:
        i, s = self._active.bracket(active)
        j, t = self._context.bracket(context)
        g = self._grid_rows
        i1 = min(i + 1, len(g) - 1)
        j1 = min(j + 1, len(g[0]) - 1)
        low = g[i][j] + t * (g[i][j1] - g[i][j])
        high = g[i1][j] + t * (g[i1][j1] - g[i1][j])
        return max(DECODE_FLOOR_MS, low + s * (high - low))

    def time_ms(
        self,
        prefill_tokens: float,
        prefill_requests: float,
        attention_pairs: float,
        prefill_context_tokens: float,
        decode_requests: float,
        decode_context_tokens: float,
        tokens_per_step: float = 1.0,
        active_kv_tokens: float = 0.0,
        kv_capacity_tokens: float = 0.0,
    ) -> float:
        decode = (
            self._decode(active_kv_tokens, decode_context_tokens / decode_requests)
            if decode_requests
            else 0.0
        )
        return self._prefill(prefill_tokens) + decode

    def decode_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[float], float]:
        decode = self._decode
        return lambda ctx: decode(ctx, ctx / decode_requests)

    def explain(self, batch: BatchShape) -> PassBreakdown:
        prefill = self._prefill(batch.prefill_tokens)
        total = self.pass_time_ms(batch)
        return PassBreakdown(
            unattributed_ms=total, extra={"prefill_ms": prefill, "decode_ms": total - prefill}
        )

    def pass_times_ms(self, batches: BatchArrays) -> np.ndarray:
        p, _, _, _, d, dctx, active = batches.filled()
        y = self._prefill_y
        if y.size > 1:
            i, t = self._prefill_x.brackets(p)
            prefill = y[i] + t * (y[i + 1] - y[i])
        else:
            prefill = np.full_like(p, y[0])
        prefill = np.where(p > 0, prefill, 0.0)
        mean_context = np.where(d > 0, dctx / np.where(d > 0, d, 1.0), 0.0)
        i, s = self._active.brackets(active)
        j, t = self._context.brackets(mean_context)
        g = self._grid
        i1 = np.minimum(i + 1, g.shape[0] - 1)
        j1 = np.minimum(j + 1, g.shape[1] - 1)
        low = g[i, j] + t * (g[i, j1] - g[i, j])
        high = g[i1, j] + t * (g[i1, j1] - g[i1, j])
        decode = np.where(d > 0, np.maximum(DECODE_FLOOR_MS, low + s * (high - low)), 0.0)
        return prefill + decode

    def describe(self) -> dict[str, object]:
        return {"provider": self.name, "source": self.source}
