"""Measured routed-expert latencies per expert shape and split (``perf/data/moe_tables.json.gz``).

The fitted MoE roofline misses the measured expert kernels by 20-35% (median) across the shapes a
database measures: grouped GEMMs step with their tiles, and how many experts a batch touches (hence
reads) depends on the routing as well as the tokens. The tables keep, per system and backend (each
backend's own kernels: SGLang's as well as vLLM's and TRT-LLM's), per expert shape (weight format,
hidden, expert width, top-k, experts) and TP x EP split, one layer's latency at every token count
measured, 1 to 16,384, under the routing skew AIConfigurator prices the shape's model with:
``benchmarks/extract_moe_tables.py`` writes them from AIConfigurator 0.12's database ("Contains
performance data from NVIDIA AIConfigurator, Apache-2.0"). Keys are ``moe_curve_key``'s, the
curves the layout of ``Calibration.moe_curves``: the analytic model reads a table like any
measured curve (linear in tokens between nodes, the last segment's slope beyond).
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources
from typing import Any

from aisimulate.catalog.backends import backend_profile
from aisimulate.perf.calibration import Calibration

DATA_FILE = "moe_tables.json.gz"

Curve = tuple[tuple[float, ...], tuple[float, ...]]


@functools.cache
def _data() -> dict[str, Any]:
    path = resources.files("aisimulate.perf") / "data" / DATA_FILE
    data: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return data


def decode(tokens: list[int], deltas: list[int | None]) -> Curve:
    """One table's (tokens, one layer's ms) at its measured nodes, from the file's coding (each
    node's ``round(100 log2(ns))`` less the previous measured node's; None: not measured)."""
    kept_tokens: list[float] = []
    latency_ms: list[float] = []
    code = 0
    for n, delta in zip(tokens, deltas, strict=True):
        if delta is None:
            continue
        code += delta
        kept_tokens.append(float(n))
        latency_ms.append(2.0 ** (code / 100.0) / 1e6)
    return tuple(kept_tokens), tuple(latency_ms)


@functools.cache
def moe_tables_for(system: str, backend: str) -> dict[str, Curve]:
    """Every MoE table measured on ``system`` with ``backend``'s kernels, by ``moe_curve_key``;
    empty where the database has none."""
    data = _data()
    entry = data["log2_ns_x100_deltas"].get(f"{system}/{backend}", {})
    return {key: decode(data["tokens"], deltas) for key, deltas in entry.items()}


def moe_curves(cal: Calibration, system: str, backend: str, kernel_tables: bool) -> dict[str, Curve]:
    """The measured curves the analytic model prices experts from: those priced by default
    (``Calibration.moe_curves``), and with ``kernel_tables`` over them the tables (the serving
    backend's own kernels over those of the backend whose kernels it borrows, over the catalog
    curves of the calibration file)."""
    if not kernel_tables:
        return cal.moe_curves
    own = moe_tables_for(system, backend)
    borrowed = moe_tables_for(system, backend_profile(backend).kernel_backend)
    return {**cal.catalog_moe_curves, **borrowed, **own, **cal.moe_curves}
