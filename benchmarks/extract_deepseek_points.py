"""Copy DeepSeek-V3's measured GEMMs from AIConfigurator's database into the calibration data.

DeepSeek-class checkpoints (MLA + 256 routed experts, block-scaled FP8 or NVFP4 experts) run
kernels the other points do not describe: block-scaled FP8 GEMMs (DeepGEMM and its kin, launched
with a smaller fixed cost than per-tensor FP8) and expert kernels whose per-GPU cost at small
token counts depends strongly on the TP/EP split (a tensor-split expert of width 256 is far from
its roofline). This script writes

* block-scaled FP8 GEMM points of DeepSeek-V3's linear layers (MLA projections, output, shared
  and dense MLP at tp 1/4/8) for the fitted systems into ``gemm_points.csv`` (their own
  ``fp8_block`` GEMM fit), replacing earlier ``fp8_block`` rows;
* NVFP4 GEMM points of the layers NVIDIA's DeepSeek-R1 FP4 checkpoints quantise (shared experts
  and dense MLP, attention output in the ``-v2`` checkpoints; tp 1/2/4/8) on every system whose
  database measured NVFP4 GEMMs (b200_sxm, b300_sxm, gb200, gb300) into ``gemm_points.csv``
  (their own ``nvfp4`` GEMM fit per system), replacing earlier ``nvfp4`` rows;
(the routed-expert curves of every catalog MoE shape, DeepSeek-V3's included, come from
``benchmarks/extract_kernel_points.py``).

    pip install -e ".[aic]"
    python benchmarks/extract_deepseek_points.py

"Contains performance data from NVIDIA AIConfigurator, Apache-2.0."
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pandas as pd
from extract_kernel_points import default_db

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "calibration"

# Database version per serving backend (the newest with the tables below).
VERSIONS = {"trtllm": "1.3.0rc20", "vllm": "0.24.0", "sglang": "0.5.14"}
GEMM_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")  # the systems with kernel fits
# Fit backend -> the database whose block-scaled FP8 GEMMs it is fitted on. The ``vllm`` fits
# serve vLLM and SGLang, which both run DeepGEMM for DeepSeek; SGLang's table is the one timed as
# served (vLLM 0.24.0's own DeepGEMM rows cost 0.17-0.27 ms a call at any size: launch-bound,
# not the kernel).
GEMM_SOURCES = {"trtllm": "trtllm", "vllm": "sglang"}
GEMM_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
H = 7168
GEMM_SHAPES = {  # (n, k): what it is in DeepSeek-V3
    (2112, H): "q_a + kv_a down-projections",
    (24576, 1536): "q_b tp1",
    (6144, 1536): "q_b tp4",
    (3072, 1536): "q_b tp8",
    (H, 16384): "o_proj tp1",
    (H, 4096): "o_proj tp4",
    (H, 2048): "o_proj tp8 / shared down tp1",
    (4096, H): "shared gate_up tp1",
    (512, H): "shared gate_up tp8",
}


# NVFP4 GEMMs: every system whose database measured them gets its own fit, from each backend's
# own table (vLLM 0.24.0's FlashInfer CuTe-DSL kernel is timed as served, unlike its DeepGEMM rows).
NVFP4_SYSTEMS = ("b200_sxm", "b300_sxm", "gb200", "gb300")
NVFP4_SOURCES = {"trtllm": "trtllm", "vllm": "vllm"}
NVFP4_SHAPES = {  # (n, k): what it is in DeepSeek-R1 FP4 (the layers its checkpoints quantise)
    (4096, H): "shared gate_up tp1",
    (2048, H): "shared gate_up tp2",
    (1024, H): "shared gate_up tp4",
    (512, H): "shared gate_up tp8",
    (H, 2048): "shared down tp1 / o_proj tp8",
    (H, 1024): "shared down tp2",
    (H, 512): "shared down tp4",
    (H, 256): "shared down tp8",
    (H, 16384): "o_proj tp1 (-v2)",
    (H, 8192): "o_proj tp2 (-v2)",
    (H, 4096): "o_proj tp4 (-v2)",
}


def _table(system: str, family: str, backend: str, name: str) -> pd.DataFrame | None:
    path = default_db() / system / family / backend / VERSIONS[backend] / name
    return pd.read_parquet(path) if path.is_file() else None


def gemm_rows(
    dtype: str = "fp8_block",
    systems: tuple[str, ...] = GEMM_SYSTEMS,
    sources: dict[str, str] = GEMM_SOURCES,
    shapes: dict[tuple[int, int], str] = GEMM_SHAPES,
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for system in systems:
        for backend, source in sources.items():
            table = _table(system, "gemm", source, "gemm_perf.parquet")
            if table is None:
                continue
            table = table[(table.gemm_dtype == dtype) & table.m.isin(GEMM_M)]
            for (n, k), note in shapes.items():
                shape = table[(table.n == n) & (table.k == k)]
                for m, group in shape.groupby("m"):
                    latency = float(group.latency.median())
                    rows.append(
                        {
                            "system": system,
                            "backend": backend,
                            "version": f"{source} {VERSIONS[source]}",
                            "kernel_source": group.kernel_source.iloc[0],
                            "dtype": dtype,
                            "m": int(m),
                            "n": n,
                            "k": k,
                            "latency_ms": round(latency, 6),
                            "achieved_tflops": round(2 * int(m) * n * k / latency / 1e9, 2),
                            "note": f"DeepSeek-{'R1 FP4' if dtype == 'nvfp4' else 'V3'} {note}",
                        }
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    gemm_path = args.data / "gemm_points.csv"
    with gemm_path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fieldnames = list(reader.fieldnames or ())
        kept = [row for row in reader if row["dtype"] not in ("fp8_block", "nvfp4")]
    new_gemm = gemm_rows() + gemm_rows("nvfp4", NVFP4_SYSTEMS, NVFP4_SOURCES, NVFP4_SHAPES)
    with gemm_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(kept)
        writer.writerows(new_gemm)
    print(f"{gemm_path}: {len(kept)} rows kept, {len(new_gemm)} fp8_block and nvfp4 rows written")


if __name__ == "__main__":
    main()
