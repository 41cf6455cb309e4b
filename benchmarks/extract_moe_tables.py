"""Write the measured MoE tables the analytic model interpolates (``moe_tables.json.gz``).

    pip install -e ".[aic]"
    python benchmarks/extract_moe_tables.py [--db DIR] [--out aisimulate/perf/data/moe_tables.json.gz]

Reads AIConfigurator 0.12's routed-expert measurements (``systems/data/<system>/moe/<backend>/
<version>/moe_perf``) of every system and backend (vLLM, TRT-LLM, SGLang: each backend's own
kernels) and keeps, per expert shape (weight format, hidden, expert width, top-k, experts) and
TP x EP split on up to ``MAX_GPUS`` GPUs, one layer's latency at every token count measured (1 to
16,384): the fastest gated kernel of the backend's reference version (``CURVE_VERSIONS``, else
the version that measured the shape most, newer on a tie), the median of repeated measurements,
as the catalog curves of ``extract_kernel_points.py`` are taken. The routing is the one
AIConfigurator prices the shape's model with: the power law of the catalog model with these
experts (``curve_routing``: 1.01 for DeepSeek, Kimi-K2 and GLM-5, 1.2 otherwise), 1.2 for the
shapes no catalog model has. TRT-LLM's tables take the sibling system's min-latency kernel where
their own database lacks it (``with_sibling_min_latency``).

Latencies are stored as ``round(100 log2(latency in ns))`` (0.35% steps), each token node's code as
its difference from the previous measured node's (null: not measured), in gzip'd JSON.
"Contains performance data from NVIDIA AIConfigurator, Apache-2.0."
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from extract_kernel_points import (
    BACKENDS,
    CURVE_VERSIONS,
    MIN_LATENCY_SIBLINGS,
    MOE_DTYPES,
    SYSTEMS,
    Row,
    _version_key,
    db_and_out,
    tables,
    with_sibling_min_latency,
)

from aisimulate.perf.calibration import moe_curve_key
from aisimulate.perf.points import curve_routing, curve_routings

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "aisimulate" / "perf" / "data" / "moe_tables.json.gz"
# Splits on more GPUs than this are left out: the catalog's deployments split experts over at most
# 64 GPUs (wide expert parallelism on NVL72 racks); the database measures up to 256.
MAX_GPUS = 64
SHAPE = ("hidden_size", "inter_size", "topk", "num_experts")


def _rows(db: Path, system: str, backend: str) -> Iterator[tuple[str, tuple, Row]]:
    """(version, expert shape, row) of every gated kernel's row of a known format, at the shape's
    routing and on up to ``MAX_GPUS`` GPUs, of every measured version."""
    where = {"moe_dtype": frozenset(MOE_DTYPES), "distribution": curve_routings()}
    for version, rows in tables(db, system, "moe", backend, "moe_perf", where):
        for r in rows:
            shape = (MOE_DTYPES[r["moe_dtype"]], *(int(r[c]) for c in SHAPE))
            small = int(r["moe_tp_size"]) * int(r["moe_ep_size"]) <= MAX_GPUS
            gated = "nongated" not in str(r["kernel_source"])
            if small and gated and r["distribution"] == curve_routing(shape):
                yield version, shape, r


def runs(db: Path, system: str, backend: str) -> dict[tuple, dict[str, float]]:
    """Per (format, hidden, width, top-k, experts, tokens, moe_tp, moe_ep) each kernel's median
    latency (ms) in the version the shape is taken from."""
    by_shape: dict[tuple, dict[str, list[Row]]] = {}
    for version, shape, r in _rows(db, system, backend):
        by_shape.setdefault(shape, {}).setdefault(version, []).append(r)
    out: dict[tuple, dict[str, float]] = {}
    for shape, versions in sorted(by_shape.items()):
        most = max(versions, key=lambda v: (len(versions[v]), _version_key(v)))
        measured: dict[tuple, dict[str, list[float]]] = {}
        for r in versions.get(CURVE_VERSIONS[backend], versions[most]):
            key = (*shape, int(r["num_tokens"]), int(r["moe_tp_size"]), int(r["moe_ep_size"]))
            measured.setdefault(key, {}).setdefault(str(r["kernel_source"]), []).append(float(r["latency"]))
        for key, by_kernel in measured.items():
            out[key] = {kernel: statistics.median(v) for kernel, v in by_kernel.items()}
    return out


def encode(latency_ms: float) -> int:
    """``round(100 log2(latency in ns))``: the file's integer code of one latency."""
    return max(round(100.0 * math.log2(latency_ms * 1e6)), 1)


def deltas(codes: list[int | None]) -> list[int | None]:
    """Each measured node's code less the previous measured node's (the first: itself); None where
    not measured. Neighbouring token counts differ by a few steps, which gzip stores in little."""
    out: list[int | None] = []
    previous = 0
    for code in codes:
        out.append(None if code is None else code - previous)
        previous = previous if code is None else code
    return out


def coded_tables(
    runs_by_key: dict[tuple, dict[str, float]], tokens: list[int]
) -> dict[str, list[int | None]]:
    """Per ``moe_curve_key`` the fastest kernel's coded latency at every token node as ``deltas``;
    a split measured at fewer than two token counts is left out."""
    by_curve: dict[str, dict[int, float]] = {}
    for (dtype, hidden, inter, topk, experts, n, tp, ep), by_kernel in runs_by_key.items():
        key = moe_curve_key(dtype, hidden, inter, topk, experts, tp, ep)
        by_curve.setdefault(key, {})[n] = min(by_kernel.values())
    return {
        key: deltas([encode(by_tokens[n]) if n in by_tokens else None for n in tokens])
        for key, by_tokens in sorted(by_curve.items())
        if len(by_tokens) >= 2
    }


def extract(db: Path) -> dict[str, Any]:
    measured: dict[str, dict[tuple, dict[str, float]]] = {}
    for system in SYSTEMS:
        for backend in BACKENDS:
            found = runs(db, system, backend)
            if found:
                measured[f"{system}/{backend}"] = found
    for system, sibling in MIN_LATENCY_SIBLINGS.items():
        key, other = f"{system}/trtllm", f"{sibling}/trtllm"
        if key in measured and other in measured:
            measured[key] = with_sibling_min_latency(measured[key], measured[other], sibling)
    tokens = sorted({k[5] for by_key in measured.values() for k in by_key})
    return {
        "attribution": "Contains performance data from NVIDIA AIConfigurator, Apache-2.0",
        "provenance": (
            "benchmarks/extract_moe_tables.py: aiconfigurator-core 0.12.0 systems/data/<system>/moe/"
            "<backend>/<version>/moe_perf, gated kernels, fastest per node, catalog routings"
        ),
        "tokens": tokens,
        "log2_ns_x100_deltas": {name: coded_tables(runs, tokens) for name, runs in sorted(measured.items())},
    }


def main() -> None:
    db, out = db_and_out(__doc__.splitlines()[0], DEFAULT_OUT)
    payload = extract(db)
    text = json.dumps(payload, sort_keys=True, separators=(",", ":")) + "\n"
    out.write_bytes(gzip.compress(text.encode(), mtime=0))
    curves = sum(len(t) for t in payload["log2_ns_x100_deltas"].values())
    print(f"{out}: {curves} curves, {out.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
