"""Append head-dim-64 prefill attention measurements from AIConfigurator's database to the points.

The bundled prefill attention points all have 128-dim heads, so the fitted efficiency describes
kernels whose two matmuls per (query, key) pair outweigh the pair's softmax. gpt-oss's heads have
64 dims: half the matmul work per pair, the same softmax (exponent, running max and sum), which
the FlashAttention-style kernels run beside the matmuls on other units. AIConfigurator measures
those kernels 14-38% slower than a FLOP-proportional price on every system and backend
(``benchmarks/data/kernel_db``); ``AttentionFit.min_pair_dims`` is the work a pair costs at
least, fitted on these points by ``calibrate_perf.py --pair-dims-only``.

This script copies gpt-oss-120b's attention geometry (64 query and 8 KV heads of 64 dims, split
over 1-8 GPUs; full-attention layers, a bf16 KV cache) at the grid of the other points (batch 1
and 8, 512, 2,048 and 8,192 tokens) into the points file, each (system, backend) from the kernel
its other points were measured with.

    pip install -e ".[aic]"
    python benchmarks/extract_attention_points.py
        [--out benchmarks/data/calibration/context_attention_points.csv]

Rows already present with 64-dim heads are replaced; the other rows stay as they are.
"Contains performance data from NVIDIA AIConfigurator, Apache-2.0."
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pandas as pd
from extract_kernel_points import aic_frame

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data" / "calibration" / "context_attention_points.csv"

# (system, backend, framework version in the database, kernel): those of the 128-dim points.
SOURCES = (
    ("h100_sxm", "trtllm", "1.3.0rc20", "torch_flow"),
    ("h200_sxm", "trtllm", "1.3.0rc20", "torch_flow"),
    ("b200_sxm", "trtllm", "1.3.0rc20", "torch_flow"),
    ("h100_sxm", "vllm", "0.24.0", "vllm_flash_attn_fa3"),
    ("h200_sxm", "vllm", "0.24.0", "vllm_flash_attn_fa3"),
    ("b200_sxm", "vllm", "0.24.0", "vllm_flashinfer_trtllmprefill"),
)
HEAD_DIM = 64
HEADS, KV_HEADS = 64, 8  # gpt-oss-120b and -20b
TP_SIZES = (1, 2, 4, 8)
BATCHES = (1, 8)
ISLS = (512, 2048, 8192)


def _table(system: str, backend: str, version: str) -> pd.DataFrame:
    return aic_frame(system, "attention", backend, version, "context_attention_perf.parquet")


def extract() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for system, backend, version, kernel in SOURCES:
        table = _table(system, backend, version)
        table = table[
            (table.kernel_source == kernel)
            & (table.head_dim == HEAD_DIM)
            & (table.window_size == 0)
            & (table.attn_dtype == "bfloat16")
            & (table.kv_cache_dtype == "bfloat16")
            & table.batch_size.isin(BATCHES)
            & table.isl.isin(ISLS)
        ]
        found = 0
        for tp in TP_SIZES:
            heads, kv_heads = HEADS // tp, max(KV_HEADS // tp, 1)
            split = table[(table.num_heads == heads) & (table.num_key_value_heads == kv_heads)]
            split = split.groupby(["batch_size", "isl"], as_index=False)["latency"].median()
            for r in split.itertuples(index=False):
                rows.append(
                    {
                        "system": system,
                        "backend": backend,
                        "version": version,
                        "kernel_source": kernel,
                        "batch": int(r.batch_size),
                        "isl": int(r.isl),
                        "num_heads": heads,
                        "num_kv_heads": kv_heads,
                        "head_dim": HEAD_DIM,
                        "attn_dtype": "bfloat16",
                        "kv_dtype": "bfloat16",
                        "latency_ms": round(float(r.latency), 6),
                        "note": f"gpt-oss-120b tp{tp}",
                    }
                )
                found += 1
        print(f"{system} {backend} {kernel}: {found} rows")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    with args.out.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fieldnames = list(reader.fieldnames or [])
        kept = [r for r in reader if int(r["head_dim"]) != HEAD_DIM]
    rows = kept + extract()
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
