"""Measured serving benchmarks as typed rows, read from CSV with errors that name the cell.

The format is the one of ``benchmarks/data/calibration/e2e_measured_h100.csv``: one closed-loop
benchmark per row (system, backend, model, precision, isl, osl, concurrency, parallel shape,
measured mean TTFT and TPOT). Extra columns are ignored, so exports of other tools can be read
as they are. The measured latencies may be named ``measured_ttft_ms`` / ``measured_tpot_ms``
or plain ``ttft_ms`` / ``tpot_ms``. The optional ``backend_version`` and ``measured`` (the day the
benchmark ran) tell which release's defaults the server ran with.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from aisimulate.errors import ConfigError

REQUIRED = ("system", "backend", "model", "isl", "osl", "concurrency", "tp")
MEASURED = {"ttft": ("measured_ttft_ms", "ttft_ms"), "tpot": ("measured_tpot_ms", "tpot_ms")}


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredRow:
    """One measured benchmark. Quantisation columns are kept as written (blank: the checkpoint's
    own); ``moe_tp``/``moe_ep`` of 0 in the source mean 1, as the benchmark files write them."""

    id: str
    line: int
    system: str
    backend: str
    backend_version: str  # as written; blank when the file does not say
    measured_on: date | None  # the ``measured`` column's day; None when the file does not say
    model: str
    precision: str
    gemm_quant: str
    moe_quant: str
    isl: int
    osl: int
    concurrency: int
    tp: int
    pp: int
    attn_dp: int
    moe_tp: int
    moe_ep: int
    measured_ttft_ms: float | None
    measured_tpot_ms: float | None

    def measured_ms(self, metric: str) -> float | None:
        """The measured mean ``"ttft"`` or ``"tpot"``."""
        return self.measured_ttft_ms if metric == "ttft" else self.measured_tpot_ms


def _int(raw: str, *, field: str, where: str, default: int | None = None, zero_is_one: bool = False) -> int:
    text = raw.strip()
    if not text and default is not None:
        return default
    try:
        value = int(float(text))
    except ValueError:
        raise ConfigError(f"{field} must be a whole number, but got {raw!r}", where=where) from None
    if value == 0 and zero_is_one:
        return 1
    if value < 1:
        raise ConfigError(f"`{field} >= 1` must hold, but got {field}={value}", where=where)
    return value


def _unrecorded(text: str) -> bool:
    """A cell the exporting tool filled in for "not recorded"."""
    return text.lower() in ("", "nan", "none", "unknown")


def _version(raw: str) -> str:
    text = raw.strip()
    return "" if _unrecorded(text) else text


def _day(raw: str, *, where: str) -> date | None:
    text = raw.strip()
    if _unrecorded(text):
        return None
    try:
        return date.fromisoformat(text[:10])
    except ValueError:
        raise ConfigError(f"measured must be an ISO date, but got {raw!r}", where=where) from None


def _latency(raw: str, *, field: str, where: str) -> float | None:
    text = raw.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{field} must be a number of milliseconds, but got {raw!r}", where=where) from None
    if not value > 0:
        raise ConfigError(f"`{field} > 0` must hold, but got {field}={value}", where=where)
    return value


def _measured_column(header: list[str], metric: str, path: Path) -> str:
    for name in MEASURED[metric]:
        if name in header:
            return name
    names = " or ".join(MEASURED[metric])
    raise ConfigError(f"missing column {names}", where=f"{path}:1")


def read_measured(path: str | Path) -> list[MeasuredRow]:
    """All rows of a measured-benchmark CSV; a malformed cell raises ``ConfigError`` naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise ConfigError(f"cannot read measured benchmarks: {err.strerror}", where=str(path)) from None
    reader = csv.DictReader(text.splitlines())
    header = list(reader.fieldnames or [])
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(missing)}", where=f"{path}:1")
    ttft_col, tpot_col = _measured_column(header, "ttft", path), _measured_column(header, "tpot", path)
    rows = []
    for line, raw in enumerate(reader, start=2):
        cell = {k: (v or "") for k, v in raw.items() if k is not None}

        def where(field: str, line: int = line) -> str:
            return f"{path}:{line}: {field}"

        for field in ("system", "backend", "model"):
            if not cell[field].strip():
                raise ConfigError(f"{field} must not be empty", where=where(field))
        rows.append(
            MeasuredRow(
                id=cell.get("id", "").strip() or f"line{line}",
                line=line,
                system=cell["system"].strip(),
                backend=cell["backend"].strip().lower(),
                backend_version=_version(cell.get("backend_version", "")),
                measured_on=_day(cell.get("measured", ""), where=where("measured")),
                model=cell["model"].strip(),
                precision=cell.get("precision", "").strip().lower(),
                gemm_quant=cell.get("gemm_quant", "").strip().lower(),
                moe_quant=cell.get("moe_quant", "").strip().lower(),
                isl=_int(cell["isl"], field="isl", where=where("isl")),
                osl=_int(cell["osl"], field="osl", where=where("osl")),
                concurrency=_int(cell["concurrency"], field="concurrency", where=where("concurrency")),
                tp=_int(cell["tp"], field="tp", where=where("tp")),
                pp=_int(cell.get("pp", ""), field="pp", where=where("pp"), default=1),
                attn_dp=_int(cell.get("attn_dp", ""), field="attn_dp", where=where("attn_dp"), default=1),
                moe_tp=_int(
                    cell.get("moe_tp", ""), field="moe_tp", where=where("moe_tp"), default=1, zero_is_one=True
                ),
                moe_ep=_int(
                    cell.get("moe_ep", ""), field="moe_ep", where=where("moe_ep"), default=1, zero_is_one=True
                ),
                measured_ttft_ms=_latency(cell[ttft_col], field=ttft_col, where=where(ttft_col)),
                measured_tpot_ms=_latency(cell[tpot_col], field=tpot_col, where=where(tpot_col)),
            )
        )
    return rows
