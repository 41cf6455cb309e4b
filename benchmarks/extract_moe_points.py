"""Append MXFP4 and DeepEP MoE kernel measurements from AIConfigurator's database to the points.

The bundled MoE points cover bf16 and block-scaled fp8 experts only. MXFP4 experts (gpt-oss) run
weight-only kernels on Hopper (4-bit weights dequantised in registers, bf16 math), which neither
fit describes: their decode cost is a quarter of bf16's weight traffic, while the bf16 fit's
small-batch compute penalty, never visible behind bf16's memory time, dominates when applied to
them. This script copies the gpt-oss expert shapes (hidden = inter = 2880, top-4 of 32 or 128
experts) of the kernel each backend runs for MXFP4 into the points file, so
``calibrate_perf.py`` fits an ``mxfp4`` MoE entry from kernel data alone.

SGLang's wide expert-parallel workers (``--moe-a2a-backend deepep``) run DeepSeek's experts as
DeepGEMM grouped GEMMs on DeepEP's dispatched layout, a kernel AIConfigurator measures apart from
its ``flashinfer_trtllm`` MoE (``wideep_{generation,context}_moe_perf.parquet``, ``deepepmoe``).
Its collector times the expert computation alone on a prebuilt dispatch output
(``run_moe_core``), so dispatch and combine are not in these latencies; the analytic model keeps
pricing them as its all-to-all. ``num_tokens`` there is the whole EP group's tokens (one rank's
times the EP size), the latency one rank's, as the analytic model prices a layer. The decode
(low-latency mode) measurements cover up to 128 tokens a rank; above them each split continues
with the prefill (normal mode) measurements, as SGLang's ``auto`` mode runs extend passes. Those
rows go to ``moe_curve_points.csv`` (``--deepep-out``) under the kernel names
``deepepmoe_low_latency`` and ``deepepmoe_normal``.

    pip install -e ".[aic]"
    python benchmarks/extract_moe_points.py [--out benchmarks/data/calibration/moe_points.csv]
        [--deepep-out benchmarks/data/calibration/moe_curve_points.csv]

Rows already present for these kernels are replaced; the other rows stay as they are.
"Contains performance data from NVIDIA AIConfigurator, Apache-2.0."
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from extract_kernel_points import aic_frame

from aisimulate.perf.points import curve_routing

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data" / "calibration" / "moe_points.csv"
DEFAULT_DEEPEP_OUT = HERE / "data" / "calibration" / "moe_curve_points.csv"

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
    return aic_frame(system, "moe", backend, version, "moe_perf.parquet")


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


# SGLang's DeepEP expert measurements (DeepSeek-V3/R1's experts, block-scaled FP8): every system
# that has them, at the version each measured.
DEEPEP_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
DEEPEP_VERSION = "0.5.10"
DEEPEP_KERNELS = ("deepepmoe_low_latency", "deepepmoe_normal")


def _deepep_table(system: str, phase: str) -> pd.DataFrame:
    """One system's DeepEP expert measurements at the routing skew of the catalog model with those
    experts (DeepSeek's 1.01, as its TRT-LLM and vLLM curves; ``curve_routing``)."""
    table = aic_frame(system, "moe", "sglang", DEEPEP_VERSION, f"wideep_{phase}_moe_perf.parquet")
    geometry = zip(table.hidden_size, table.inter_size, table.topk, table.num_experts, strict=True)
    routed = [curve_routing(("", *map(int, g))) for g in geometry]
    table = table[(table.distribution == routed) & (table.moe_tp_size == 1)]
    keys = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size", "distribution"]
    return table.groupby([*keys, "num_tokens"], as_index=False)["latency"].median()


def extract_deepep() -> list[dict[str, object]]:
    """Each system's DeepEP expert curves: the low-latency (decode) points, then the normal-mode
    (prefill) points beyond the largest decode batch of the same split and routing."""
    rows: list[dict[str, object]] = []
    for system in DEEPEP_SYSTEMS:
        decode, prefill = _deepep_table(system, "generation"), _deepep_table(system, "context")
        reach = decode.groupby(["moe_ep_size", "distribution"]).num_tokens.max().to_dict()
        beyond = [
            int(r.num_tokens) > reach.get((r.moe_ep_size, r.distribution), float("inf"))
            for r in prefill.itertuples(index=False)
        ]
        for kernel, table in zip(DEEPEP_KERNELS, (decode, prefill[beyond]), strict=True):
            for r in table.itertuples(index=False):
                rows.append(
                    {
                        "system": system,
                        "backend": "sglang",
                        "kernel_source": kernel,
                        "moe_dtype": r.moe_dtype,
                        "num_tokens": int(r.num_tokens),
                        "hidden": int(r.hidden_size),
                        "inter": int(r.inter_size),
                        "topk": int(r.topk),
                        "num_experts": int(r.num_experts),
                        "moe_tp": 1,
                        "moe_ep": int(r.moe_ep_size),
                        "distribution": r.distribution,
                        "latency_ms": round(float(r.latency), 6),
                    }
                )
        print(f"{system} sglang deepepmoe: {len(decode)} decode, {sum(beyond)} prefill rows")
    return rows


def _replace_rows(path: Path, stale: Callable[[dict[str, str]], bool], new: list[dict[str, object]]) -> int:
    """Rewrite ``path`` with its rows that are not ``stale`` followed by ``new`` (in the file's own
    line endings); the kept count."""
    with path.open(newline="") as fh:
        ending = "\r\n" if fh.readline().endswith("\r\n") else "\n"
        fh.seek(0)
        reader = csv.DictReader(fh)
        fieldnames = list(reader.fieldnames or ())
        kept = [row for row in reader if not stale(row)]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames, lineterminator=ending)
        writer.writeheader()
        writer.writerows(kept)
        writer.writerows(new)
    return len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--deepep-out", type=Path, default=DEFAULT_DEEPEP_OUT)
    args = parser.parse_args()
    new = extract()
    kept = _replace_rows(args.out, lambda row: row["moe_dtype"] == MOE_DTYPE, new)
    print(f"{args.out}: {kept} rows kept, {len(new)} {MOE_DTYPE} rows written")
    new = extract_deepep()
    kept = _replace_rows(args.deepep_out, lambda row: row["kernel_source"] in DEEPEP_KERNELS, new)
    print(f"{args.deepep_out}: {kept} rows kept, {len(new)} DeepEP rows written")


if __name__ == "__main__":
    main()
