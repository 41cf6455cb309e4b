"""Append MXFP4 MoE kernel measurements from AIConfigurator's database to ``moe_points.csv``.

The bundled MoE points cover bf16 and block-scaled fp8 experts only. MXFP4 experts (gpt-oss) run
weight-only kernels on Hopper (4-bit weights dequantised in registers, bf16 math), which neither
fit describes: their decode cost is a quarter of bf16's weight traffic, while the bf16 fit's
small-batch compute penalty, never visible behind bf16's memory time, dominates when applied to
them. This script copies the gpt-oss expert shapes (hidden = inter = 2880, top-4 of 32 or 128
experts) of the kernel each backend runs for MXFP4 into the points file, so
``calibrate_perf.py`` fits an ``mxfp4`` MoE entry from kernel data alone.

    pip install -e ".[aic]"
    python benchmarks/extract_moe_points.py [--out benchmarks/data/calibration/moe_points.csv]

Rows already present for these kernels are replaced; the other rows stay as they are.
"Contains performance data from NVIDIA AIConfigurator, Apache-2.0."
"""

from __future__ import annotations

import argparse
import csv
from importlib import resources
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data" / "calibration" / "moe_points.csv"

# (system, backend, framework version in the database, kernel the backend runs for gpt-oss).
SOURCES = (
    ("h100_sxm", "vllm", "0.24.0", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"),
    ("h200_sxm", "vllm", "0.24.0", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"),
    (
        "b200_sxm",
        "vllm",
        "0.24.0",
        "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
    ),
    ("h100_sxm", "trtllm", "1.3.0rc20", "moe_torch_flow"),
    ("h200_sxm", "trtllm", "1.3.0rc20", "moe_torch_flow"),
    ("b200_sxm", "trtllm", "1.3.0rc20", "moe_torch_flow"),
)
MOE_DTYPE = "w4a16_mxfp4"
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# Expert splits a gpt-oss deployment uses: tensor-split experts on 1-8 GPUs, or expert parallel.
SPLITS = ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (1, 4), (1, 8))
DISTRIBUTIONS = ("balanced", "power_law_1.2")  # as the bf16 / fp8 points
MODELS = {128: "gpt-oss-120b routed experts", 32: "gpt-oss-20b routed experts"}


def _table(system: str, backend: str, version: str) -> pd.DataFrame:
    root = resources.files("aiconfigurator_core") / "systems" / "data" / system / "moe" / backend / version
    return pd.read_parquet(str(root / "moe_perf.parquet"))


def extract() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for system, backend, version, kernel in SOURCES:
        table = _table(system, backend, version)
        table = table[
            (table.kernel_source == kernel)
            & (table.moe_dtype == MOE_DTYPE)
            & (table.hidden_size == 2880)
            & (table.inter_size == 2880)
            & (table.topk == 4)
            & table.num_experts.isin(list(MODELS))
            & table.num_tokens.isin(TOKENS)
            & table.distribution.isin(DISTRIBUTIONS)
        ]
        split = list(zip(table.moe_tp_size, table.moe_ep_size, strict=True))
        table = table[[s in SPLITS for s in split]]
        table = table.groupby(
            ["num_experts", "moe_tp_size", "moe_ep_size", "distribution", "num_tokens"], as_index=False
        )["latency"].median()
        for r in table.itertuples(index=False):
            rows.append(
                {
                    "system": system,
                    "backend": backend,
                    "version": version,
                    "kernel_source": kernel,
                    "moe_dtype": MOE_DTYPE,
                    "num_tokens": int(r.num_tokens),
                    "hidden": 2880,
                    "inter": 2880,
                    "topk": 4,
                    "num_experts": int(r.num_experts),
                    "moe_tp": int(r.moe_tp_size),
                    "moe_ep": int(r.moe_ep_size),
                    "distribution": r.distribution,
                    "latency_ms": round(float(r.latency), 6),
                    "note": f"{MODELS[int(r.num_experts)]}, MXFP4",
                }
            )
        print(f"{system} {backend} {kernel}: {len(table)} rows")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    with args.out.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fieldnames = list(reader.fieldnames or ())
        kept = [row for row in reader if row["moe_dtype"] != MOE_DTYPE]
    new = extract()
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(kept)
        writer.writerows(new)
    print(f"{args.out}: {len(kept)} rows kept, {len(new)} {MOE_DTYPE} rows written")


if __name__ == "__main__":
    main()
