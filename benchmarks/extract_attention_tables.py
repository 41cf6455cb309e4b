"""Write the measured attention tables the analytic model interpolates (``attention_tables.json``).

    pip install -e ".[aic]"
    python benchmarks/extract_attention_tables.py [--db DIR]
        [--out aisimulate/perf/data/attention_tables.json.gz]

Reads AIConfigurator 0.12's context and generation attention tables (``systems/data/<system>/
attention/<backend>/<version>/{context,generation}_attention_perf``: full attention, bf16 math)
for every system and backend, of the (version, kernel) ``extract_kernel_points.py`` keeps. One
layer's latency depends on the batch and the heads mostly through their product: a kernel's grid
is (requests x heads x query tiles) in prefill and (sequences x KV heads x KV splits) in decode. So
per (system, backend, head_dim, KV format) the table keeps, at powers of two of that product
(``width``: batch x heads in prefill, batch x KV heads in decode) and every prompt or KV length
measured, the median latency of every measured (batch, heads) giving that product. Grouped-query
heads only in prefill (two or more query heads a KV head: the catalog's models; multi-head
prefill reads more KV and runs 5-15% slower). Head dims 64, 128 and 256 (the catalog's).
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path
from typing import Any

from extract_kernel_points import BACKENDS, KV_DTYPES, SYSTEMS, _attention_dtype, db_and_out, pick_kernel

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "aisimulate" / "perf" / "data" / "attention_tables.json.gz"
HEAD_DIMS = (64, 128, 256)
WIDTHS = tuple(2**i for i in range(15))  # 1 to 16,384
# MLA decode heads per GPU kept: the catalog's MLA models' 64 or 128 heads on up to 8 (16) GPUs.
MLA_MIN_HEADS = 8


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def phase_tables(db: Path, system: str, backend: str, phase: str) -> tuple[dict[str, Any], str]:
    """``{"<head_dim>/<kv>": {"length": [...], "latency_ms": [[... per length] per width]}}`` and
    the (version, kernel) measured."""
    where = {"window_size": frozenset({0}), "attn_dtype": frozenset({"bfloat16"})}
    picked = pick_kernel(db, system, "attention", backend, f"{phase}_attention_perf", _attention_dtype, where)
    out: dict[str, Any] = {}
    source = ""
    for kv, rows in sorted(picked.items()):
        source = f"{rows[0]['_version']} {rows[0]['kernel_source']}"
        cells: dict[tuple[int, int, int], list[float]] = {}
        for r in rows:
            heads, kv_heads, dim = int(r["num_heads"]), int(r["num_key_value_heads"]), int(r["head_dim"])
            batch = int(r["batch_size"])
            if dim not in HEAD_DIMS or (phase == "context" and heads < 2 * kv_heads):
                continue
            width = batch * (heads if phase == "context" else kv_heads)
            length = int(r["isl"]) if phase == "context" else int(r["isl"]) + int(r["step"])
            if _is_pow2(width) and width <= WIDTHS[-1]:
                cells.setdefault((dim, width, length), []).append(float(r["latency"]))
        for dim in HEAD_DIMS:
            by_dim = {(w, s): v for (d, w, s), v in cells.items() if d == dim}
            if by_dim:
                out[f"{dim}/{kv}"] = _grid(by_dim)
    return out, source


def _grid(cells: dict[tuple[int, int], list[float]]) -> dict[str, Any]:
    """One table: the median latency at every (width, length) measured, as round(100 log2(ns))
    (0.35% at most off; 0: not measured), rows from the narrowest measured width to the widest."""
    lengths = sorted({s for _, s in cells})
    widths = [w for w in WIDTHS if any((w, s) in cells for s in lengths)]
    rows = [
        [
            0 if (v := cells.get((w, s))) is None else round(100 * math.log2(statistics.median(v) * 1e6))
            for s in lengths
        ]
        for w in WIDTHS[WIDTHS.index(widths[0]) : WIDTHS.index(widths[-1]) + 1]
    ]
    return {"length": lengths, "first_width": widths[0], "log2_ns_x100": rows}


def mla_tables(db: Path, system: str, backend: str, phase: str) -> tuple[dict[str, Any], str]:
    """MLA on DeepSeek-V3's geometry (TRT-LLM's and SGLang's kernels; vLLM's database measured
    whole attention modules only). Prefill by width batch x heads (``<kv>``); decode by heads
    per GPU (``<heads>/<kv>``) and width batch: its kernels split the heads into fixed groups, so
    the product does not carry it (15% spread against 1% in prefill)."""

    def keep(row: dict[str, Any]) -> str | None:
        return KV_DTYPES.get(row["kv_cache_dtype"]) if row["mla_dtype"] == "bfloat16" else None

    picked = pick_kernel(db, system, "mla", backend, f"{phase}_mla_perf", keep)
    out: dict[str, Any] = {}
    source = ""
    for kv, rows in sorted(picked.items()):
        source = f"{rows[0]['_version']} {rows[0]['kernel_source']}"
        cells: dict[str, dict[tuple[int, int], list[float]]] = {}
        for r in rows:
            batch, heads = int(r["batch_size"]), int(r["num_heads"])
            length = int(r["isl"]) + int(r["step"])
            key, width = (kv, batch * heads) if phase == "context" else (f"{heads}/{kv}", batch)
            if phase == "generation" and heads < MLA_MIN_HEADS:
                continue
            if _is_pow2(width) and width <= WIDTHS[-1]:
                cells.setdefault(key, {}).setdefault((width, length), []).append(float(r["latency"]))
        out.update({key: _grid(c) for key, c in cells.items()})
    return out, source


def extract(db: Path) -> dict[str, Any]:
    tables: dict[str, Any] = {"context": {}, "generation": {}, "context_mla": {}, "generation_mla": {}}
    sources: dict[str, str] = {}
    for system in SYSTEMS:
        for backend in BACKENDS:
            for phase in tables:
                reader = mla_tables if phase.endswith("_mla") else phase_tables
                by_shape, source = reader(db, system, backend, phase.removesuffix("_mla"))
                if by_shape:
                    tables[phase][f"{system}/{backend}"] = by_shape
                    sources[f"{phase}/{system}/{backend}"] = source
    return {
        "attribution": "Contains performance data from NVIDIA AIConfigurator, Apache-2.0",
        "provenance": (
            "benchmarks/extract_attention_tables.py: aiconfigurator-core 0.12.0 systems/data/<system>/"
            "attention/<backend>/<version>/{context,generation}_attention_perf (kernel_sources)"
        ),
        "kernel_sources": sources,
        "width": list(WIDTHS),
        **tables,
    }


def main() -> None:
    db, out = db_and_out(__doc__.splitlines()[0], DEFAULT_OUT)
    payload = extract(db)
    text = json.dumps(payload, sort_keys=True, separators=(",", ":")) + "\n"
    out.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    print(f"{out}: {out.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
