"""Extract TRT-LLM's measured MLA context-attention kernels, the points its MLA fits are fitted on.

Reads ``systems/data/<system>/mla/trtllm/<version>/context_mla_perf.parquet`` of aiconfigurator-core
(the `aic` extra): the MLA prefill kernel on DeepSeek-V3's geometry (128 heads split over TP),
over a bf16 and an fp8 KV cache, on every system the serving runs span. Per system and KV format
the (version, kernel) measured most often is kept (``extract_kernel_points.pick_kernel``), at
least 8 heads a GPU (DeepSeek at TP 16 or less) and 64 prompt tokens a batch; the points sampled
into ``benchmarks/data/kernel_db/context_mla_points.csv`` are left out (``perf_accuracy.py``
judges the fits on them), and a seeded sample of at most ``CAP`` rows per group is kept.

    python benchmarks/extract_mla_points.py [--db DIR]
        [--out benchmarks/data/calibration/context_mla_points.csv]

Contains performance data from NVIDIA AIConfigurator, Apache-2.0.
"""

from __future__ import annotations

import csv
from pathlib import Path

from extract_kernel_points import KV_DTYPES, SYSTEMS, _dedupe, db_and_out, pick_kernel, subsample

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data" / "calibration" / "context_mla_points.csv"
HELD_OUT = HERE / "data" / "kernel_db" / "context_mla_points.csv"
CAP = 240
MIN_HEADS = 8
MIN_BATCH_TOKENS = 64
COLUMNS = (
    "system",
    "backend",
    "version",
    "kernel_source",
    "batch",
    "isl",
    "num_heads",
    "kv_dtype",
    "latency_ms",
)


def _key(system: str, kv: str, batch: object, isl: object, heads: object) -> tuple[str, ...]:
    return (system, kv, str(int(batch)), str(int(isl)), str(int(heads)))  # type: ignore[call-overload]


def held_out() -> set[tuple[str, ...]]:
    with HELD_OUT.open(newline="") as fh:
        return {
            _key(r["system"], r["kv_dtype"], r["batch"], r["isl"], r["num_heads"])
            for r in csv.DictReader(fh)
            if r["backend"] == "trtllm"
        }


def extract(db: Path) -> list[dict[str, object]]:
    skip = held_out()
    out: list[dict[str, object]] = []
    for system in SYSTEMS:

        def keep(row: dict) -> str | None:
            return KV_DTYPES.get(row["kv_cache_dtype"]) if row["mla_dtype"] == "bfloat16" else None

        picked = pick_kernel(db, system, "mla", "trtllm", "context_mla_perf", keep)
        for kv, rows in sorted(picked.items()):
            rows = _dedupe(rows, lambda r: (int(r["batch_size"]), int(r["isl"]), int(r["num_heads"])))
            rows = [
                r
                for r in rows
                if int(r["num_heads"]) >= MIN_HEADS
                and int(r["batch_size"]) * int(r["isl"]) >= MIN_BATCH_TOKENS
                and _key(system, kv, r["batch_size"], r["isl"], r["num_heads"]) not in skip
            ]
            for r in subsample(rows, CAP, f"context_mla/{system}/trtllm/{kv}"):
                out.append(
                    {
                        "system": system,
                        "backend": "trtllm",
                        "version": r["_version"],
                        "kernel_source": r["kernel_source"],
                        "batch": int(r["batch_size"]),
                        "isl": int(r["isl"]),
                        "num_heads": int(r["num_heads"]),
                        "kv_dtype": kv,
                        "latency_ms": float(f"{float(r['latency']):.6g}"),
                    }
                )
    return out


def main() -> None:
    db, out = db_and_out(__doc__.splitlines()[0], DEFAULT_OUT)
    rows = extract(db)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"context_mla_points: {len(rows)} rows -> {out}")


if __name__ == "__main__":
    main()
