"""Fit the analytic perf model's kernel efficiency constants to measured kernel data.

Writes the ``fits`` of ``aisimulate/perf/data/calibration.json``: kernel families are fitted per
(system, backend, dtype) by least squares on the log error. The end-to-end entries (per-pass
overheads, ``e2e_fit``) are kept as they are; ``benchmarks/calibrate_e2e.py`` fits them next.

    python benchmarks/calibrate_perf.py [--data benchmarks/data/calibration] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from aisimulate.catalog import get_system
from aisimulate.perf.calibration import write_calibration_data
from aisimulate.perf.points import (
    FIT_TYPES,
    fit_key,
    is_default_curve,
    load_curve_points,
    load_points,
    moe_curves,
    predict,
)

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data" / "calibration"
DEFAULT_OUT = HERE.parent / "aisimulate" / "perf" / "data" / "calibration.json"

# Free parameters and bounds per family; the rest keep their dataclass defaults.
BOUNDS = {
    "gemm": {
        "e_max": (0.05, 1.0),
        "m_half": (0.0, 4096.0),
        "mem_eff": (0.05, 1.0),
        "t0_ms": (0.0, 0.05),
        "per_k_ms": (0.0, 1e-5),
    },
    "context_attention": {
        "compute_eff": (0.02, 1.0),
        "kv_half": (0.0, 8192.0),
        "t0_ms": (0.0, 0.1),
        "per_request_ms": (0.0, 0.01),
        "min_pair_dims": (0.0, 512.0),
    },
    "context_mla": {
        "compute_eff": (0.02, 1.0),
        "kv_half": (0.0, 8192.0),
        "t0_ms": (0.0, 0.1),
        "per_request_ms": (0.0, 0.01),
    },
    "generation_attention": {"mem_eff": (0.05, 1.0), "t0_ms": (0.0, 0.1), "per_request_ms": (0.0, 0.01)},
    "moe": {
        "e_max": (0.02, 1.0),
        "x_half": (0.0, 1024.0),
        "mem_eff": (0.05, 1.0),
        "t0_ms": (0.0, 0.2),
        "ep_skew": (0.0, 1.0),
    },
    "allreduce": {"bw_eff": (0.01, 1.0), "latency_ms": (0.0, 0.1), "latency_per_log2_ms": (0.0, 0.05)},
    "alltoall": {"bw_eff": (0.01, 1.0), "latency_ms": (0.0, 0.1), "latency_per_log2_ms": (0.0, 0.05)},
}
# Where a free parameter starts when its dataclass default is no place to start from: a pair's
# least work binds no 128-dim point and no 64-dim point below 128 dims, so it starts where both
# feel it.
START = {"context_attention": {"min_pair_dims": 256.0}}
ATTRIBUTION = "Contains performance data from NVIDIA AIConfigurator, Apache-2.0"


def fit_group(family: str, points: list, fixed: dict[str, float] | None = None) -> dict[str, float]:
    """The family's fit to ``points``; ``fixed`` parameters are held, not fitted."""
    cls = FIT_TYPES[family]
    fixed = fixed or {}
    names = [n for n in BOUNDS[family] if n not in fixed]
    lo = np.array([BOUNDS[family][n][0] for n in names])
    hi = np.array([BOUNDS[family][n][1] for n in names])
    base = cls(**fixed)
    start = START.get(family, {})
    x0 = np.array([start.get(n, getattr(base, n)) for n in names], dtype=float)
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    systems = {p.system: get_system(p.system) for p in points}
    measured = np.log([p.measured_ms for p in points])

    def residual(x: np.ndarray) -> np.ndarray:
        fit = replace(base, **dict(zip(names, x, strict=True)))
        return np.log([max(predict(p, fit, systems[p.system]), 1e-9) for p in points]) - measured

    result = least_squares(residual, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    fitted = asdict(replace(base, **dict(zip(names, result.x, strict=True))))
    return {k: float(f"{float(v):.6g}") for k, v in fitted.items()}


def measured_moe_curves(data_dir: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """Every densely measured MoE kernel shape, per ``system/backend`` that measured it: those
    priced by their curves by default (the points of ``moe_points.csv`` and DeepSeek-V3/R1's
    experts), and the other catalog shapes' (the ``kernel_tables`` switch)."""
    curve_points = load_curve_points(data_dir)
    default = load_points(data_dir) + [p for p in curve_points if is_default_curve(p)]
    catalog = [p for p in curve_points if not is_default_curve(p)]
    out = []
    for name, points in (("default", default), ("catalog", catalog)):
        curves = {f"{system}/{backend}": shapes for (system, backend), shapes in moe_curves(points).items()}
        for key, shapes in curves.items():
            print(f"curves moe {name:18s} {key:16s} {len(shapes)} measured shapes")
        out.append(curves)
    return out[0], out[1]


def fit_pair_dims(data_dir: Path, fits: dict[str, dict]) -> None:
    """Refit each prefill attention entry's ``min_pair_dims`` alone, in place, holding its other
    fitted constants (points narrower than 128 dims bind it; the others do not move)."""
    groups: dict[tuple, list] = defaultdict(list)
    for point in load_points(data_dir):
        if point.family == "context_attention":
            groups[point.group].append(point)
    for (family, system, backend, dtype), points in sorted(groups.items()):
        entry = fits[f"{system}/{backend}"][family]
        fixed = {k: v for k, v in entry.items() if k != "min_pair_dims"}
        entry["min_pair_dims"] = fit_group(family, points, fixed)["min_pair_dims"]
        print(f"fitted {family:21s} {system:9s} {backend:6s} {dtype:9s} n={len(points):3d} {entry}")


def fit_kernels(
    data_dir: Path, gemm_only: frozenset[str] = frozenset(), families: frozenset[str] = frozenset()
) -> dict[str, dict]:
    """Every family's fits; with ``gemm_only``, only those weight formats' GEMM fits; with
    ``families``, only those families' fits."""
    groups: dict[tuple, list] = defaultdict(list)
    for point in load_points(data_dir):
        if families and point.family not in families:
            continue
        if not gemm_only or (point.family == "gemm" and point.dtype in gemm_only):
            groups[point.group].append(point)
    fits: dict[str, dict] = defaultdict(dict)
    ep_skew: dict[tuple[str, str], float] = {}

    def one_split(points: list) -> bool:
        return len({p.row.get("moe_ep") for p in points}) == 1

    # The routing skew shows only across expert-parallel splits: a MoE group measured at one split
    # takes its (system, backend)'s from a group measured at several, which is fitted first.
    order = sorted(groups.items(), key=lambda item: (one_split(item[1]), item[0]))
    for (family, system, backend, dtype), points in order:
        fixed = None
        if family == "moe" and one_split(points):
            fixed = {"ep_skew": ep_skew.get((system, backend), 0.0)}
        params = fit_group(family, points, fixed)
        if family == "moe" and fixed is None:
            ep_skew[(system, backend)] = params["ep_skew"]
        entry = fits[f"{system}/{backend}"]
        if family in ("gemm", "moe"):
            entry.setdefault(family, {})[fit_key(points[0], get_system(system))] = params
        elif family == "context_mla":  # by KV-cache format
            entry.setdefault(family, {})[dtype] = params
        else:
            entry[family] = params
        print(f"fitted {family:21s} {system:9s} {backend:6s} {dtype:9s} n={len(points):3d} {params}")
    for entry in fits.values():
        # Decode MLA matmuls run on the same tensor cores as prefill attention. (Systems measured
        # for one format's GEMMs only, e.g. b300_sxm's nvfp4, have no attention entries.)
        if "context_attention" in entry:
            entry["generation_attention"]["compute_eff"] = entry["context_attention"]["compute_eff"]
    return dict(fits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--curves-only",
        action="store_true",
        help="rewrite the measured MoE curves only, keeping the fitted constants as they are",
    )
    parser.add_argument(
        "--gemm-only",
        default="",
        help="comma-separated weight formats (e.g. nvfp4): refit only their GEMM fits and the "
        "curves, keeping every other fitted constant as it is",
    )
    parser.add_argument(
        "--pair-dims-only",
        action="store_true",
        help="refit only the prefill attention fits' min_pair_dims (and the curves), keeping every "
        "other fitted constant as it is",
    )
    parser.add_argument(
        "--mla-only",
        action="store_true",
        help="refit only the MLA prefill fits (context_mla_points.csv) and the curves, keeping every "
        "other fitted constant as it is",
    )
    args = parser.parse_args()
    # The end-to-end entries belong to calibrate_e2e.py, which runs after this script.
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    gemm_only = frozenset(f for f in args.gemm_only.split(",") if f)
    if args.curves_only:
        fits = previous["fits"]
    elif args.pair_dims_only:
        fits = previous["fits"]
        fit_pair_dims(args.data, fits)
    elif args.mla_only:
        fits = previous["fits"]
        for key, entry in fit_kernels(args.data, families=frozenset({"context_mla"})).items():
            fits.setdefault(key, {})["context_mla"] = entry["context_mla"]
    elif gemm_only:
        fits = previous["fits"]
        for key, entry in fit_kernels(args.data, gemm_only).items():
            fits.setdefault(key, {}).setdefault("gemm", {}).update(entry["gemm"])
    else:
        fits = fit_kernels(args.data)
    default_curves, catalog_curves = measured_moe_curves(args.data)
    payload = {
        "provenance": (
            "Kernel fits by benchmarks/calibrate_perf.py to single-kernel measurements "
            "(benchmarks/data/calibration/*_points.csv: h100_sxm, h200_sxm, b200_sxm x vllm, trtllm; "
            "nvfp4 GEMMs also on b300_sxm, gb200, gb300, whose other fits are b200_sxm's); "
            "moe_curves: measured MoE latencies per kernel shape, system and backend (moe_points.csv, "
            "moe_curve_points.csv: DeepSeek-V3/R1's experts); moe_catalog_curves: every other catalog "
            "MoE shape in moe_curve_points.csv (h100_sxm, h200_sxm, b200_sxm, b300_sxm, gb200, gb300), "
            "used with kernel_tables on; "
            "context_mla: TRT-LLM's MLA prefill kernels per KV-cache format (context_mla_points.csv, "
            "h100_sxm, h200_sxm, b200_sxm, b300_sxm, gb200, gb300; benchmarks/extract_mla_points.py); "
            "per-pass overheads and e2e_fit by benchmarks/calibrate_e2e.py to end-to-end H100 "
            "serving benchmarks (e2e_measured_h100.csv), fitted on the models in e2e_fit.models only."
        ),
        "attribution": ATTRIBUTION,
        "fits": fits,
        "moe_curves": default_curves,
        "moe_catalog_curves": catalog_curves,
        "overhead": previous.get("overhead", {}),
        "e2e_fit": previous.get("e2e_fit", {}),
    }
    write_calibration_data(args.out, payload)
    n = sum(len(v) for v in fits.values())
    print(
        json.dumps({"benchmark": "calibrate_perf", "entries": len(fits), "families": n, "out": str(args.out)})
    )


if __name__ == "__main__":
    main()
