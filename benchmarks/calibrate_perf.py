"""Fit the analytic perf model's efficiency constants to measured kernel and serving data.

Writes ``aisimulate/perf/data/calibration.json``. Kernel families are fitted per (system,
backend, dtype) by least squares on the log error; the per-pass framework overhead of each
backend is then fitted to the steady-state TPOT of the end-to-end H100 measurements.

    python benchmarks/calibrate_perf.py [--data benchmarks/data/calibration] [--out PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import ConfigError
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.calibration import calibration_from_entry
from aisimulate.perf.kernels import OverheadFit
from aisimulate.perf.model import equal_chunk_pairs
from aisimulate.perf.points import FIT_TYPES, load_points, predict
from aisimulate.perf.shape import ParallelShape

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data" / "calibration"
DEFAULT_OUT = HERE.parent / "aisimulate" / "perf" / "data" / "calibration.json"

# Free parameters and bounds per family; the rest keep their dataclass defaults.
BOUNDS = {
    "gemm": {"e_max": (0.05, 1.0), "m_half": (0.0, 4096.0), "mem_eff": (0.05, 1.0), "t0_ms": (0.0, 0.05)},
    "context_attention": {
        "compute_eff": (0.02, 1.0),
        "kv_half": (0.0, 8192.0),
        "t0_ms": (0.0, 0.1),
        "per_request_ms": (0.0, 0.01),
    },
    "generation_attention": {"mem_eff": (0.05, 1.0), "t0_ms": (0.0, 0.1), "per_request_ms": (0.0, 0.01)},
    "moe": {"e_max": (0.02, 1.0), "x_half": (0.0, 1024.0), "mem_eff": (0.05, 1.0), "t0_ms": (0.0, 0.2)},
    "allreduce": {"bw_eff": (0.01, 1.0), "latency_ms": (0.0, 0.1), "latency_per_log2_ms": (0.0, 0.05)},
    "alltoall": {"bw_eff": (0.01, 1.0), "latency_ms": (0.0, 0.1), "latency_per_log2_ms": (0.0, 0.05)},
}
ATTRIBUTION = "Contains performance data from NVIDIA AIConfigurator, Apache-2.0"


def fit_group(family: str, points: list) -> dict[str, float]:
    cls = FIT_TYPES[family]
    names = list(BOUNDS[family])
    lo = np.array([BOUNDS[family][n][0] for n in names])
    hi = np.array([BOUNDS[family][n][1] for n in names])
    base = cls()
    x0 = np.clip(np.array([getattr(base, n) for n in names], dtype=float), lo + 1e-9, hi - 1e-9)
    systems = {p.system: get_system(p.system) for p in points}
    measured = np.log([p.measured_ms for p in points])

    def residual(x: np.ndarray) -> np.ndarray:
        fit = replace(base, **dict(zip(names, x, strict=True)))
        return np.log([max(predict(p, fit, systems[p.system]), 1e-9) for p in points]) - measured

    result = least_squares(residual, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    fitted = asdict(replace(base, **dict(zip(names, result.x, strict=True))))
    return {k: round(float(v), 6) for k, v in fitted.items()}


def fit_kernels(data_dir: Path) -> dict[str, dict]:
    groups: dict[tuple, list] = defaultdict(list)
    for point in load_points(data_dir):
        groups[point.group].append(point)
    fits: dict[str, dict] = defaultdict(dict)
    for (family, system, backend, dtype), points in sorted(groups.items()):
        params = fit_group(family, points)
        entry = fits[f"{system}/{backend}"]
        if family in ("gemm", "moe"):
            entry.setdefault(family, {})["fp8" if dtype.startswith("fp8") else "bf16"] = params
        else:
            entry[family] = params
        print(f"fitted {family:21s} {system:9s} {backend:6s} {dtype:9s} n={len(points):3d} {params}")
    for entry in fits.values():
        # Decode MLA matmuls run on the same tensor cores as prefill attention.
        entry["generation_attention"]["compute_eff"] = entry["context_attention"]["compute_eff"]
    return dict(fits)


def _e2e_rows(path: Path):
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["measured_tpot_ms"] and row["system"] == "h100_sxm":
                yield row


def _e2e_perf(row: dict[str, str], calibration) -> AnalyticPerfModel | None:
    """The analytic model of one measured deployment, or None for a shape we cannot build."""
    model = get_model(row["model"])
    if row["precision"] == "fp8" and model.weight_dtype == "bf16":
        model = model.with_quantization(weight_dtype="fp8")
    moe_tp, moe_ep = (int(row[k] or 0) or None for k in ("moe_tp", "moe_ep"))
    shape = ParallelShape(tp=int(row["tp"]), pp=int(row["pp"]))
    if model.is_moe and moe_tp and moe_ep:
        shape = ParallelShape(tp=int(row["tp"]), pp=int(row["pp"]), moe_tp=moe_tp, moe_ep=moe_ep)
    try:
        return AnalyticPerfModel(
            model, get_system(row["system"]), shape, backend=row["backend"], calibration=calibration
        )
    except ConfigError:
        return None


def steady_state_step_ms(perf: AnalyticPerfModel, isl: int, osl: int, concurrency: int) -> float:
    """Mean pass time of a closed loop: every step decodes all users and prefills the
    arrivals that replace finished ones (concurrency / osl requests per step on average)."""
    arrivals = concurrency / osl
    prefill = arrivals * isl
    return perf.time_ms(
        prefill,
        arrivals,
        equal_chunk_pairs(prefill, arrivals, 0.0),
        0.0,
        concurrency,
        concurrency * (isl + osl / 2),
    )


def fit_overheads(fits: dict[str, dict], e2e_path: Path) -> dict[str, dict]:
    by_backend: dict[str, list[tuple[float, float]]] = defaultdict(list)
    zero = OverheadFit(base_ms=0.0, per_sequence_ms=0.0)
    for row in _e2e_rows(e2e_path):
        kernel_backend = "vllm" if row["backend"] == "sglang" else row["backend"]
        key = f"{row['system']}/{kernel_backend}"
        calibration = replace(calibration_from_entry(fits[key], None, key), overhead=zero)
        perf = _e2e_perf(row, calibration)
        if perf is None:
            continue
        predicted = steady_state_step_ms(perf, int(row["isl"]), int(row["osl"]), int(row["concurrency"]))
        by_backend[row["backend"]].append(
            (int(row["concurrency"]), float(row["measured_tpot_ms"]), predicted)
        )
    overheads = {}
    for backend, rows in sorted(by_backend.items()):
        c, measured, predicted = (np.array(col, dtype=float) for col in zip(*rows, strict=True))

        def relative(x: np.ndarray, c=c, measured=measured, predicted=predicted) -> np.ndarray:
            return (predicted + x[0] + x[1] * c - measured) / measured

        # Robust relative fit: one badly modelled deployment must not set every backend's overhead.
        solution = least_squares(
            relative, [0.5, 0.001], bounds=([0.0, 0.0], [20.0, 0.5]), loss="soft_l1", f_scale=0.1
        )
        base, per_seq = solution.x
        overheads[backend] = {"base_ms": round(float(base), 4), "per_sequence_ms": round(float(per_seq), 6)}
        print(
            f"overhead {backend:6s} rows={len(rows):3d} base={base:.3f} ms "
            f"per_sequence={per_seq * 1000:.2f} us"
        )
    return overheads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    fits = fit_kernels(args.data)
    overheads = fit_overheads(fits, args.data / "e2e_measured_h100.csv")
    payload = {
        "provenance": (
            "Fitted by benchmarks/calibrate_perf.py to single-kernel measurements "
            "(benchmarks/data/calibration/*_points.csv: h100_sxm, h200_sxm, b200_sxm x vllm, trtllm) "
            "and to end-to-end H100 TPOT (e2e_measured_h100.csv) for the per-pass overheads."
        ),
        "attribution": ATTRIBUTION,
        "fits": fits,
        "overhead": overheads,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    n = sum(len(v) for v in fits.values())
    print(
        json.dumps({"benchmark": "calibrate_perf", "entries": len(fits), "families": n, "out": str(args.out)})
    )


if __name__ == "__main__":
    main()
