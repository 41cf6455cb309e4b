"""Held-out error of the analytic kernels, per family and system, on every system's database.

    python benchmarks/perf_accuracy.py [--data benchmarks/data/kernel_db]
        [--fitted benchmarks/data/calibration] [--systems h100_sxm,...]

Each point of the sample of AIConfigurator's whole kernel database (``--data``, written by
``benchmarks/extract_kernel_points.py``) is priced as the analytic model prices it, by something
that never saw it: the fitted constants (points the fit was fitted on, ``--fitted``, are left
out); the GEMM tables (the sampled shapes are off the tables' nodes); a MoE shape's measured
curve, an all-reduce or all-to-all table, with this very point left out; an attention or MLA
table without the point's width node. Two columns per system: the analytic model with its
measured kernel tables off (the default: fits, and the MoE curves of DeepSeek-V3/R1 and gpt-oss)
and on (``kernel_tables``: GEMM, all-reduce, all-to-all, attention, MLA and MoE tables; the MoE
tables hold every expert shape, format and split the database measured, each backend's own
kernels, so a point is priced by its own shape's table without its token count). MoE is
reported for the catalog's expert shapes and the others, and by weight format and split. Prints
a table and one JSON summary line (median |error| per family and system, tables on;
``above_5pct`` lists the misses).

The weight formats with GEMM fits of their own (``fp8_block``, ``nvfp4``) are also judged on the
very shapes they were fitted on (``--fitted``), one shape left out at a time: each shape is priced
by the format's fit refitted without it (``gemm/<format> loso``), next to the fit the format
borrowed before it had its own (the math dtype's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.dtypes import math_dtype
from aisimulate.catalog.systems import get_system
from aisimulate.perf.attention_tables import attention_table_for
from aisimulate.perf.calibration import GEMM_FORMAT_FITS, calibration_for, moe_curve_key
from aisimulate.perf.kernel_tables import (
    CollectiveTable,
    allreduce_tables_for,
    alltoall_tables_for,
    gemm_tables_for,
)
from aisimulate.perf.kernels import GemmFit, MeasuredCurve
from aisimulate.perf.moe_tables import moe_curves
from aisimulate.perf.points import (
    DATABASE_SYSTEMS,
    Point,
    calibrated_fit,
    load_database_points,
    load_points,
    moe_a2a,
    point_key,
    predict,
)

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data" / "kernel_db"
DEFAULT_FITTED = HERE / "data" / "calibration"
AIM = 0.05  # the calibration issue's aim for every family and system


def _i(point: Point, key: str) -> int:
    return int(float(point.row[key]))


def moe_left_out(point: Point, kernel_tables: bool) -> float | None:
    """The point's MoE shape's measured curve, as the analytic model picks it, without this token
    count (None: the shape has no curve)."""
    system = get_system(point.system)
    cal = calibration_for(system, point.backend)
    key = moe_curve_key(
        point.dtype,
        *(_i(point, c) for c in ("hidden", "inter", "topk", "num_experts", "moe_tp", "moe_ep")),
        moe_a2a(point.row),
    )
    curves = moe_curves(cal, point.system, point.backend, kernel_tables)
    if key not in curves:
        return None
    tokens, per_layer_ms = curves[key]
    x = float(_i(point, "num_tokens"))
    kept = [(t, y) for t, y in zip(tokens, per_layer_ms, strict=True) if t != x]
    if len(kept) < 2:
        return None
    curve = MeasuredCurve(tuple(t for t, _ in kept), tuple(y for _, y in kept), 1.0)
    return float(curve.scalar()(x))


def gemm_tabled(point: Point) -> float | None:
    """The point's GEMM priced by its system, backend and format's table (None: not covered)."""
    system = get_system(point.system)
    kernel_backend = backend_profile(point.backend).kernel_backend
    table = gemm_tables_for(point.system, point.backend, kernel_backend).get(point.dtype)
    native = point.dtype == "bf16" or math_dtype(point.dtype, system.math_dtypes) != "bf16"
    if table is None or not native:
        return None
    curve_ms = table.curve_ms(_i(point, "n"), _i(point, "k"))
    if curve_ms is None:
        return None
    return float(MeasuredCurve(table.m, tuple(curve_ms.tolist()), 1.0).scalar()(_i(point, "m")))


def collective_left_out(point: Point) -> float | None:
    """The point's all-reduce (its system, backend and GPU count's table) or NCCL all-to-all (its
    system and GPU count's) without this message size (None: no table)."""
    if point.family == "alltoall":
        table = alltoall_tables_for(point.system).get(_i(point, "num_gpus"))
        size = 2.0 * _i(point, "message_elements")
    else:
        kernel_backend = backend_profile(point.backend).kernel_backend
        table = allreduce_tables_for(point.system, point.backend, kernel_backend).get(_i(point, "num_gpus"))
        size = float(point.row["message_bytes"])
    if table is None:
        return None
    kept = [(b, t) for b, t in zip(table.message_bytes, table.latency_ms, strict=True) if b != size]
    if len(kept) < 2:
        return None
    rest = CollectiveTable(tuple(b for b, _ in kept), tuple(t for _, t in kept))
    return float(rest.time_ms(np.array([size]))[0])


def attention_left_out(point: Point) -> float | None:
    """The point's attention (or MLA) from its system and backend's table without the point's
    width node (a 2x gap; widths off the powers of two are off the nodes anyway); None: no table
    (multi-head prefill, MLA decode on fewer than 8 heads a GPU, vLLM's MLA)."""
    heads, batch = _i(point, "num_heads"), _i(point, "batch")
    phase = point.family.removesuffix("_attention")
    length = _i(point, "isl") if phase.startswith("context") else _i(point, "kv_len")
    if phase == "context_mla":
        shape, width = "bf16", batch * heads
    elif phase == "generation_mla":
        shape, width = f"{heads}/bf16", batch
    else:
        kv_heads = _i(point, "num_kv_heads")
        if phase == "context" and heads < 2 * kv_heads:
            return None
        shape, width = f"{_i(point, 'head_dim')}/bf16", batch * (heads if phase == "context" else kv_heads)
    kernel_backend = backend_profile(point.backend).kernel_backend
    table = attention_table_for(point.system, point.backend, kernel_backend, phase, shape)
    if table is None:
        return None
    return table.without_width(width).time_ms(width, length)


def gemm_format_loso(points: list[Point]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """|error| of the format GEMM fits on their own fitted shapes, each (n, k) shape priced by the
    fit refitted without it (``on``), and by the fit the format borrowed without one (``off``)."""
    from calibrate_perf import fit_group  # the script beside this one; needs scipy

    groups: dict[tuple[str, ...], list[Point]] = {}
    for p in points:
        if p.family == "gemm" and p.dtype in GEMM_FORMAT_FITS:
            groups.setdefault(p.group, []).append(p)
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for (_, system_name, _, dtype), group in sorted(groups.items()):
        system = get_system(system_name)
        borrowed = calibration_for(system, group[0].backend).gemm_fit(math_dtype(dtype, system.math_dtypes))
        cell = out.setdefault((f"gemm/{dtype} loso", system_name), {"off": [], "on": []})
        shapes = sorted({(_i(p, "n"), _i(p, "k")) for p in group})
        for shape in shapes:
            held = [p for p in group if (_i(p, "n"), _i(p, "k")) == shape]
            fit = GemmFit(**fit_group("gemm", [p for p in group if (_i(p, "n"), _i(p, "k")) != shape]))
            for p in held:
                cell["on"].append(abs(float(predict(p, fit, system)) / p.measured_ms - 1.0))
                cell["off"].append(abs(float(predict(p, borrowed, system)) / p.measured_ms - 1.0))
    return out


def families_of(point: Point) -> tuple[str, ...]:
    """GEMMs by weight format; MoE apart for the catalog models' expert shapes (``curve``: what
    served models run) and the other shapes the database measured, and again by weight format
    and split (one GPU, tensor-split, expert-parallel, both)."""
    if point.family == "gemm":
        return (f"gemm/{point.dtype}",)
    if point.family == "moe":
        tp, ep = _i(point, "moe_tp"), _i(point, "moe_ep")
        split = "1gpu" if tp * ep == 1 else "tp" if ep == 1 else "ep" if tp == 1 else "tpxep"
        shapes = "moe/catalog" if point.row.get("curve") == "1" else "moe/other"
        return shapes, f"moe/{point.dtype} {split}"
    return (point.family,)


def errors(points: list[Point]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """|predicted / measured - 1| by (family, system), with the analytic model's measured kernel
    tables off (``off``: fits, DeepSeek's and gpt-oss's MoE curves) and on (``on``: GEMM tables,
    the MoE tables)."""
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for point in points:
        fitted = float(predict(point, calibrated_fit(point)))
        off = on = fitted
        if point.family == "moe":
            off = moe_left_out(point, False) or fitted
            on = moe_left_out(point, True) or fitted
        elif point.family == "gemm":
            on = gemm_tabled(point) or fitted
        elif point.family in ("allreduce", "alltoall"):
            on = collective_left_out(point) or fitted
        elif point.family in ("context_attention", "generation_attention", "context_mla", "generation_mla"):
            on = attention_left_out(point) or fitted
        for family in families_of(point):
            cell = out.setdefault((family, point.system), {"off": [], "on": []})
            cell["off"].append(abs(off / point.measured_ms - 1.0))
            cell["on"].append(abs(on / point.measured_ms - 1.0))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--fitted", type=Path, default=DEFAULT_FITTED)
    parser.add_argument("--systems", default=",".join(DATABASE_SYSTEMS))
    args = parser.parse_args()
    systems = tuple(args.systems.split(","))
    fitted_points = [p for p in load_points(args.fitted) if p.system in systems]
    fitted = {point_key(p) for p in fitted_points}
    points = [p for p in load_database_points(args.data, systems) if point_key(p) not in fitted]
    table = errors(points) | gemm_format_loso(fitted_points)
    families = sorted({f for f, _ in table})
    print(f"{'family':22s} " + " ".join(f"{s:>15s}" for s in systems))
    print(f"{'(off -> on, n)':22s} " + " ".join(f"{'':>15s}" for _ in systems))
    summary: dict[str, dict[str, float]] = {}
    tables_off: dict[str, dict[str, float]] = {}
    for family in families:
        cells = []
        for system in systems:
            cell = table.get((family, system))
            if cell is None:
                cells.append(f"{'-':>15s}")
                continue
            off, on = statistics.median(cell["off"]), statistics.median(cell["on"])
            summary.setdefault(family, {})[system] = round(on, 4)
            tables_off.setdefault(family, {})[system] = round(off, 4)
            cells.append(f"{off:5.1%} {on:5.1%} {len(cell['on']):3d}".rjust(15))
        print(f"{family:22s} " + " ".join(cells))
    over = sorted(f"{f}/{s}" for f, by in summary.items() for s, v in by.items() if v > AIM)
    print(
        json.dumps(
            {
                "benchmark": "perf_accuracy",
                "held_out_median_abs_error": summary,
                "kernel_tables_off_median_abs_error": tables_off,
                "points": len(points),
                "above_5pct": over,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
