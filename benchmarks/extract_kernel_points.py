"""Extract the calibration points from AIConfigurator's measured kernel database, every system.

Reads ``systems/data/<system>/<family>/<backend>/<version>/*_perf.parquet`` of aiconfigurator-core
(the `aic` extra) for every system the catalog knows and every backend (vLLM, TRT-LLM, SGLang),
and rewrites the ``*_points.csv`` files of ``benchmarks/data/calibration/``:

- GEMM (bf16, fp8, fp8_block, nvfp4), context and generation attention (bf16 and fp8 KV, full
  attention), MLA context and generation kernels, routed-expert MoE (bf16, fp8, fp8_block, nvfp4,
  MXFP4; power-law routing, every measured TP/EP split), the backends' custom all-reduce and
  NCCL all-reduce / all-to-all.
- Per (system, backend, family, dtype) one kernel is kept: the (version, kernel) pair measured
  most often, the newer version on a tie (the database keeps older versions and alternative
  kernels beside the default one). GEMMs keep, per shape, the fastest kernel of that version.
- The tables hold 5k-140k rows per file; a seeded random subsample of at most ``CAP[family]``
  rows per group is kept, so the repository stays small. MoE expert shapes of the catalog's
  models are kept whole (every split on up to 8 GPUs, tokens 1 to 16,384 in powers of two):
  the analytic model interpolates them.

    pip install -e ".[aic]"
    python benchmarks/extract_kernel_points.py [--db DIR] [--out benchmarks/data/kernel_db]
        [--tables-out aisimulate/perf/data/kernel_tables.json] [--curves-only]

``--curves-only`` rewrites ``moe_curve_points.csv`` alone (its DeepEP rows, which
``extract_moe_points.py`` adds, are kept); ``calibrate_perf.py`` then rebuilds the curves of
``calibration.json`` from it. Each shape's curves are taken at the routing skew of the catalog
model with those experts (``ModelSpec.moe_routing_alpha``: 1.01 for the DeepSeek, Kimi-K2 and
GLM-5 architectures, 1.2 for the others; ``aisimulate.perf.points.curve_routing``).

It also writes the kernel tables the analytic model interpolates (``--tables-out``): GEMM per
system, backend and weight format, the fastest kernel's latency on a grid of token counts (powers
of two, 1 to 32,768) and weight shapes (n and k powers of two, 128 to 16,384, and 65,536), the
nodes the database measured; and each backend's all-reduce at every measured size and GPU count.
The sampled GEMM points that are table nodes are dropped from the points file:
the points file is what the tables are judged on, held out.

A table may also be a ``.csv`` with the database's columns (tests use a tiny one).
"Contains performance data from NVIDIA AIConfigurator, Apache-2.0."
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import random
import statistics
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from aisimulate.catalog import get_model, list_models, list_systems
from aisimulate.catalog.backends import BACKEND_PROFILES
from aisimulate.perf.points import MOE_ROUTING, curve_routing, curve_routings

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data" / "kernel_db"
DEFAULT_TABLES = HERE.parent / "aisimulate" / "perf" / "data" / "kernel_tables.json"
DEFAULT_CURVES = HERE / "data" / "calibration" / "moe_curve_points.csv"
# The systems the serving runs span (AIConfigurator 0.12 measured each).
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
BACKENDS = ("vllm", "trtllm", "sglang")

# Rows kept per (system, backend, dtype) group; collectives are small and kept whole.
CAP = {"gemm": 90, "context_attention": 90, "generation_attention": 90, "mla": 60, "moe": 150}
# GEMM grids reach down to 32x32 weights; a served model's per-GPU projections are larger (the
# smallest catalog one at TP8 has about 2M weights). Fitting the tiny shapes would trade the
# memory-bound decode of real layers for launch-bound kernels no pass runs.
GEMM_MIN_WEIGHTS = 2**21
# vLLM 0.24's block-fp8 GEMM rows take 57-87 us at every token count up to 1,024 (H100/H200),
# where the same DeepGEMM kernel under SGLang takes 9-35 us: a measurement harness cost, not the
# kernel. A fit to them would add it to every GEMM of a pass; vLLM's block-fp8 GEMMs take its
# per-tensor fp8 fit instead.
SKIPPED = frozenset({("gemm", "vllm", "fp8_block")})
CURVE_TOKENS = frozenset(4**i for i in range(8))  # 1 to 16,384
CURVE_BACKENDS = frozenset({"vllm", "trtllm"})  # SGLang is priced with vLLM's kernels
CURVE_SPLITS = frozenset({(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (1, 4), (1, 8)})

GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
MOE_DTYPES = {
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "w4a16_mxfp4": "mxfp4",
    "w4a8_mxfp4_mxfp8": "mxfp4_mxfp8",
}

Row = dict[str, Any]


def default_db() -> Path:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit('error: AIConfigurator is not installed: pip install -e ".[aic]"')
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


def db_and_out(description: str, default_out: Path) -> tuple[Path, Path]:
    """The ``--db`` (AIConfigurator's systems/data, the installed one by default) and ``--out``
    of an extraction script that takes nothing else."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db", type=Path, default=None, help="AIConfigurator's systems/data directory")
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()
    return args.db or default_db(), args.out


def aic_frame(*parts: str) -> Any:
    """One measured table of AIConfigurator's database (``systems/data/<parts...>``) as a pandas
    frame; the extraction scripts share it so a missing install fails with one clear line."""
    import pandas as pd

    return pd.read_parquet(default_db().joinpath(*parts))


def _version_key(version: str) -> tuple:
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def read_table(path: Path, where: dict[str, frozenset] | None = None) -> list[Row]:
    """The table's rows whose ``where`` columns (where it has them) hold an allowed value."""
    where = where or {}
    if path.suffix == ".parquet":
        import pandas as pd

        frame = pd.read_parquet(path)
        for column, allowed in where.items():
            if column in frame:
                frame = frame[frame[column].isin(list(allowed))]
        return frame.to_dict("records")
    with path.open(newline="") as fh:
        rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(fh)]
    return [r for r in rows if all(c not in r or r[c] in allowed for c, allowed in where.items())]


def _number(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def tables(
    db: Path, system: str, family: str, backend: str, stem: str, where: dict | None
) -> Iterator[tuple[str, list[Row]]]:
    """(version, rows) of every measured version of one table."""
    root = db / system / family / backend
    if not root.is_dir():
        return
    for version_dir in sorted(root.iterdir(), key=lambda p: _version_key(p.name)):
        for suffix in (".parquet", ".csv"):
            path = version_dir / f"{stem}{suffix}"
            if path.is_file():
                yield version_dir.name, read_table(path, where)


def pick_kernel(
    db: Path, system: str, family: str, backend: str, stem: str, keep, where: dict | None = None
) -> dict[str, list[Row]]:
    """Rows ``keep`` maps to a dtype, of the (version, kernel) measured most often per dtype."""
    candidates: dict[str, dict[tuple[str, str], list[Row]]] = {}
    for version, rows in tables(db, system, family, backend, stem, where):
        for row in rows:
            dtype = keep(row)
            if dtype is not None:
                key = (version, str(row["kernel_source"]))
                candidates.setdefault(dtype, {}).setdefault(key, []).append({**row, "_version": version})
    chosen = {}
    for dtype, by_kernel in candidates.items():
        key = max(by_kernel, key=lambda k: (len(by_kernel[k]), _version_key(k[0])))
        chosen[dtype] = by_kernel[key]
    return chosen


def subsample(rows: list[Row], cap: int, seed: str) -> list[Row]:
    if len(rows) <= cap:
        return rows
    rng = random.Random(zlib.crc32(seed.encode()))
    return [rows[i] for i in sorted(rng.sample(range(len(rows)), cap))]


def _dedupe(rows: Iterable[Row], key) -> list[Row]:
    """One row per measured configuration (repeated measurements: the first)."""
    seen: dict[tuple, Row] = {}
    for row in rows:
        seen.setdefault(key(row), row)
    return [seen[k] for k in sorted(seen)]


def _base(system: str, backend: str, row: Row) -> Row:
    """Which system and backend; the kernel's version and name go to ``kernel_sources.csv``."""
    return {
        "system": system,
        "backend": backend,
        "_version": row["_version"],
        "_kernel": row["kernel_source"],
    }


# The GEMM tables' nodes: token counts and weight dimensions every database grid measured.
TABLE_M = tuple(2**i for i in range(16))  # 1 to 32,768
TABLE_NK = (*(2**i for i in range(7, 15)), 65536)  # 128 to 16,384, and 65,536


def gemm_rows(db: Path, system: str, backend: str) -> dict[str, list[Row]]:
    """A backend picks its GEMM kernel per shape (DeepGEMM for large token counts, CUTLASS or
    FlashInfer for small ones): per weight format, each shape keeps the fastest kernel measured in
    the version that measured the format most."""
    where = {"gemm_dtype": frozenset(GEMM_DTYPES)}
    by_version: dict[str, dict[str, list[Row]]] = {}
    for version, rows in tables(db, system, "gemm", backend, "gemm_perf", where):
        for row in rows:
            dtype = GEMM_DTYPES.get(row["gemm_dtype"])
            if dtype is not None and ("gemm", backend, dtype) not in SKIPPED:
                by_version.setdefault(dtype, {}).setdefault(version, []).append({**row, "_version": version})
    out = {}
    for dtype, versions in sorted(by_version.items()):
        version = max(versions, key=lambda v: (len(versions[v]), _version_key(v)))
        fastest = sorted(versions[version], key=lambda r: float(r["latency"]))
        out[dtype] = _dedupe(fastest, lambda r: (int(r["m"]), int(r["n"]), int(r["k"])))
    return out


def _on_table(row: Row) -> bool:
    return int(row["m"]) in TABLE_M and int(row["n"]) in TABLE_NK and int(row["k"]) in TABLE_NK


def gemm_points(rows_by_dtype: dict[str, list[Row]], system: str, backend: str) -> list[Row]:
    """A sample of the served-size shapes (``GEMM_MIN_WEIGHTS``) off the table's nodes."""
    out = []
    for dtype, rows in rows_by_dtype.items():
        big = [r for r in rows if int(r["n"]) * int(r["k"]) >= GEMM_MIN_WEIGHTS and not _on_table(r)]
        for r in subsample(big, CAP["gemm"], f"gemm/{system}/{backend}/{dtype}"):
            out.append(
                {**_base(system, backend, r), "dtype": dtype, "m": r["m"], "n": r["n"], "k": r["k"]}
                | {"latency_ms": r["latency"]}
            )
    return out


def gemm_table(rows: list[Row]) -> list[float | None]:
    """Latency (ms, 4 significant digits) at every node, m-major then n then k; None where the
    grid lacks the node (block-scaled kernels skip some shapes)."""
    by_node = {(int(r["m"]), int(r["n"]), int(r["k"])): float(r["latency"]) for r in rows if _on_table(r)}
    return [
        float(f"{by_node[(m, n, k)]:.4g}") if (m, n, k) in by_node else None
        for m in TABLE_M
        for n in TABLE_NK
        for k in TABLE_NK
    ]


def _attention_dtype(row: Row) -> str | None:
    full = int(row.get("window_size", 0)) == 0 and int(row.get("beam_width", 1)) == 1
    return KV_DTYPES.get(row["kv_cache_dtype"]) if full and row["attn_dtype"] == "bfloat16" else None


def attention_points(db: Path, system: str, backend: str, phase: str) -> list[Row]:
    family = f"{phase}_attention"
    where = {"window_size": frozenset({0}), "attn_dtype": frozenset({"bfloat16"})}
    picked = pick_kernel(db, system, "attention", backend, f"{family}_perf", _attention_dtype, where)
    rows = []
    for kv_dtype, chosen in sorted(picked.items()):
        for r in chosen:
            rows.append({**r, "_kv": kv_dtype})
    geometry = ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim")
    rows = _dedupe(rows, lambda r: (r["_kv"], *(int(r[c]) for c in geometry)))
    out = []
    for r in subsample(rows, CAP[family], f"{family}/{system}/{backend}"):
        length = {"isl": r["isl"]} if phase == "context" else {"kv_len": int(r["isl"]) + int(r["step"])}
        out.append(
            {**_base(system, backend, r), "batch": r["batch_size"], **length, "num_heads": r["num_heads"]}
            | {"num_kv_heads": r["num_key_value_heads"], "head_dim": r["head_dim"], "kv_dtype": r["_kv"]}
            | {"latency_ms": r["latency"]}
        )
    return out


def mla_points(db: Path, system: str, backend: str, phase: str) -> list[Row]:
    def keep(row: Row) -> str | None:
        return KV_DTYPES.get(row["kv_cache_dtype"]) if row["mla_dtype"] == "bfloat16" else None

    picked = pick_kernel(db, system, "mla", backend, f"{phase}_mla_perf", keep)
    rows = [{**r, "_kv": kv} for kv, chosen in sorted(picked.items()) for r in chosen]
    rows = _dedupe(
        rows, lambda r: (r["_kv"], int(r["batch_size"]), int(r["isl"]), int(r["step"]), int(r["num_heads"]))
    )
    out = []
    for r in subsample(rows, CAP["mla"], f"{phase}_mla/{system}/{backend}"):
        length = {"isl": r["isl"]} if phase == "context" else {"kv_len": int(r["isl"]) + int(r["step"])}
        out.append(
            {**_base(system, backend, r), "batch": r["batch_size"], **length, "num_heads": r["num_heads"]}
            | {"kv_dtype": r["_kv"], "latency_ms": r["latency"]}
        )
    return out


def catalog_moe_shapes() -> dict[tuple[str, int, int, int, int], str]:
    # Rows of these shapes get ``curve = 1``: measured curves the analytic model interpolates.
    """(weight format, hidden, expert width, top-k, experts) of each catalog MoE model, in its
    checkpoint's format and in each format a backend runs those experts in instead."""
    shapes: dict[tuple[str, int, int, int, int], str] = {}
    for name in list_models():
        m = get_model(name)
        if m.is_moe:
            own = m.linear_dtype(expert=True)
            formats = {own} | {p.expert_kernel_format(own, 100) for p in BACKEND_PROFILES.values()}
            for dtype in sorted(formats):
                key = (dtype, m.hidden_size, m.moe_intermediate_size, m.experts_per_token, m.num_experts)
                shapes.setdefault(key, name)
    return shapes


def moe_points(db: Path, system: str, backend: str, models: dict) -> list[Row]:
    def keep(row: Row) -> str | None:
        gated = "nongated" not in str(row["kernel_source"])
        return MOE_DTYPES.get(row["moe_dtype"]) if gated and row["distribution"] == MOE_ROUTING else None

    where = {"distribution": frozenset({MOE_ROUTING}), "moe_dtype": frozenset(MOE_DTYPES)}
    picked = pick_kernel(db, system, "moe", backend, "moe_perf", keep, where)
    geometry = CURVE_COLUMNS
    out = []
    for dtype, chosen in sorted(picked.items()):
        rows = _dedupe(chosen, lambda r: tuple(int(r[c]) for c in geometry))
        curve, rest = [], []
        for r in rows:
            model = models.get((dtype, *(int(r[c]) for c in geometry[1:5])))
            split = (int(r["moe_tp_size"]), int(r["moe_ep_size"]))
            on_curve = (
                model
                and backend in CURVE_BACKENDS
                and split in CURVE_SPLITS
                and int(r["num_tokens"]) in CURVE_TOKENS
            )
            (curve if on_curve else rest).append({**r, "_model": model if on_curve else ""})
        for r in curve + subsample(rest, CAP["moe"], f"moe/{system}/{backend}/{dtype}"):
            out.append(
                {**_base(system, backend, r), "moe_dtype": dtype, "num_tokens": r["num_tokens"]}
                | {"hidden": r["hidden_size"], "inter": r["inter_size"], "topk": r["topk"]}
                | {"num_experts": r["num_experts"], "moe_tp": r["moe_tp_size"], "moe_ep": r["moe_ep_size"]}
                | {"curve": int(bool(r["_model"])), "latency_ms": r["latency"]}
            )
    return out


# The measured MoE curves the analytic model interpolates (``moe_curve_points.csv`` of the
# calibration data): every catalog model's expert shape, dense in tokens where decode batches fall
# and where the kernels step (tile sizes), sparser beyond. DeepSeek-V3/R1's experts (served at many
# mixed TP x EP splits) keep every split on up to 64 GPUs and three backends; the other shapes the
# pure splits (TP or EP alone) on up to 16 GPUs, vLLM's and TRT-LLM's (SGLang reads vLLM's, as
# its kernel fits do), at powers of two: the data file stays small.
EVERY_SPLIT_SHAPES = frozenset({("fp8_block", 7168, 2048, 8, 256), ("nvfp4", 7168, 2048, 8, 256)})
CURVE_POINT_TOKENS = frozenset({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384})
EVERY_SPLIT_TOKENS = CURVE_POINT_TOKENS | {48, 96, 192, 384}
CURVE_MAX_GPUS = {True: 64, False: 16}
# The newest database version with the MoE tables, per backend.
CURVE_VERSIONS = {"trtllm": "1.3.0rc20", "vllm": "0.24.0", "sglang": "0.5.14"}
CURVE_COLUMNS = (
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
)


# TRT-LLM runs DeepSeek's NVFP4 experts with two kernels: CUTLASS and the min-latency one
# (TRT-LLM-gen), 2-3x faster at decode sizes, which the fastest-kernel rule picks. aiconfigurator-core
# 0.12 measured the min-latency kernel on b200_sxm and gb200 only; on b300_sxm and gb300 it has
# CUTLASS alone. Their curves take the sibling's min-latency latency where it is below their own
# CUTLASS (the same kernel on the same memory system: decode-sized experts are bound by reading
# their weights).
MIN_LATENCY_SIBLINGS = {"b300_sxm": "b200_sxm", "gb300": "gb200"}
MIN_LATENCY_KERNEL = "moe_torch_flow_min_latency"


def moe_curve_runs(db: Path, system: str, backend: str, models: dict) -> dict[tuple, dict[str, float]]:
    """Per (format, hidden, width, top-k, experts, tokens, moe_tp, moe_ep) of the catalog's expert
    shapes, each kernel's median latency in the backend's reference version
    (``CURVE_VERSIONS``), else the version that measured the shape most (newer on a tie)."""
    where = {
        "distribution": curve_routings(),
        "moe_dtype": frozenset(MOE_DTYPES),
    }
    by_shape: dict[tuple, dict[str, list[Row]]] = {}
    for version, rows in tables(db, system, "moe", backend, "moe_perf", where):
        for r in rows:
            dtype = MOE_DTYPES.get(r["moe_dtype"])
            shape = (dtype, *(int(r[c]) for c in CURVE_COLUMNS[1:5]))
            every = shape in EVERY_SPLIT_SHAPES
            if not every and backend == "sglang":
                continue
            tokens, tp, ep = int(r["num_tokens"]), int(r["moe_tp_size"]), int(r["moe_ep_size"])
            on_grid = tokens in (EVERY_SPLIT_TOKENS if every else CURVE_POINT_TOKENS)
            small = tp * ep <= CURVE_MAX_GPUS[every] and (every or min(tp, ep) == 1)
            gated = "nongated" not in str(r["kernel_source"])
            routed = r["distribution"] == curve_routing(shape)
            if shape in models and on_grid and small and gated and routed:
                by_shape.setdefault(shape, {}).setdefault(version, []).append(r)
    out: dict[tuple, dict[str, float]] = {}
    for shape, versions in sorted(by_shape.items()):
        preferred = CURVE_VERSIONS[backend]
        most = max(versions, key=lambda v: (len(versions[v]), _version_key(v)))
        version = preferred if preferred in versions else most
        runs: dict[tuple, dict[str, list[float]]] = {}
        for r in versions[version]:
            key = (*shape, int(r["num_tokens"]), int(r["moe_tp_size"]), int(r["moe_ep_size"]))
            runs.setdefault(key, {}).setdefault(str(r["kernel_source"]), []).append(float(r["latency"]))
        for key, by_kernel in runs.items():
            out[key] = {k: statistics.median(v) for k, v in by_kernel.items()}
    return out


def with_sibling_min_latency(
    runs: dict[tuple, dict[str, float]], sibling: dict[tuple, dict[str, float]], sibling_name: str
) -> dict[tuple, dict[str, float]]:
    """``runs`` plus, where the min-latency kernel was not measured and the sibling measured it,
    the sibling's latency of it."""
    out = {}
    for key, by_kernel in runs.items():
        other = sibling.get(key, {})
        if MIN_LATENCY_KERNEL not in by_kernel and MIN_LATENCY_KERNEL in other:
            by_kernel = {**by_kernel, f"{MIN_LATENCY_KERNEL} ({sibling_name})": other[MIN_LATENCY_KERNEL]}
        out[key] = by_kernel
    return out


def moe_curve_points(
    db: Path, system: str, backend: str, models: dict, runs: dict[tuple, dict[str, float]] | None = None
) -> list[Row]:
    """Per catalog expert shape, split and token count the fastest kernel of ``moe_curve_runs``
    (TRT-LLM's NVFP4 min-latency MoE is 2-3x its CUTLASS one at decode sizes), the median of
    repeated measurements."""
    if runs is None:
        runs = moe_curve_runs(db, system, backend, models)
    out = []
    for key, by_kernel in sorted(runs.items()):
        kernel, latency = min(by_kernel.items(), key=lambda kv: kv[1])
        dtype, hidden, inter, topk, experts, tokens, moe_tp, moe_ep = key
        out.append(
            {"system": system, "backend": backend, "kernel_source": kernel, "moe_dtype": dtype}
            | {"num_tokens": tokens, "hidden": hidden, "inter": inter, "topk": topk}
            | {"num_experts": experts, "moe_tp": moe_tp, "moe_ep": moe_ep}
            | {"distribution": curve_routing((dtype, hidden, inter, topk, experts))}
            | {"latency_ms": round(latency, 6)}
        )
    return out


def allreduce_points(db: Path, system: str, backend: str) -> list[Row]:
    def keep(row: Row) -> str | None:
        graph = "eager" not in str(row["kernel_source"]).lower()
        return "bf16" if graph and row["op_name"] == "all_reduce" else None

    picked = pick_kernel(db, system, "comm", backend, "custom_allreduce_perf", keep).get("bf16", [])
    rows = _dedupe(picked, lambda r: (int(r["num_gpus"]), int(r["message_size"])))
    return [
        {**_base(system, backend, r), "num_gpus": r["num_gpus"], "message_elements": r["message_size"]}
        | {"message_bytes": 2 * int(r["message_size"]), "latency_ms": r["latency"]}
        for r in rows
    ]


def nccl_points(db: Path, system: str) -> list[Row]:
    def keep(row: Row) -> str | None:
        return row["op_name"] if row["op_name"] in ("all_reduce", "alltoall") else None

    out = []
    for op, rows in sorted(pick_kernel(db, system, "comm", "nccl", "nccl_perf", keep).items()):
        for r in _dedupe(rows, lambda r: (int(r["num_gpus"]), int(r["message_size"]))):
            out.append(
                {"system": system, "_version": r["_version"], "_kernel": "NCCL", "op": op}
                | {
                    "num_gpus": r["num_gpus"],
                    "message_elements": r["message_size"],
                    "latency_ms": r["latency"],
                }
            )
    return out


def allreduce_table(rows: list[Row]) -> dict[str, dict[str, list[float]]]:
    """Per GPU count, the all-reduce latency (ms, 4 significant digits) by message size."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in sorted(rows, key=lambda r: (int(r["num_gpus"]), int(r["message_bytes"]))):
        table = out.setdefault(str(int(r["num_gpus"])), {"message_bytes": [], "latency_ms": []})
        table["message_bytes"].append(int(r["message_bytes"]))
        table["latency_ms"].append(float(f"{float(r['latency_ms']):.4g}"))
    return out


def curve_rows(db: Path, system: str, backend: str, models: dict) -> list[Row]:
    """The MoE curve points of one system and backend (``moe_curve_points``), TRT-LLM's with the
    sibling system's min-latency kernel where its own database lacks it."""
    runs = moe_curve_runs(db, system, backend, models)
    sibling = MIN_LATENCY_SIBLINGS.get(system)
    if backend == "trtllm" and sibling and (db / sibling).is_dir():
        runs = with_sibling_min_latency(runs, moe_curve_runs(db, sibling, backend, models), sibling)
    return moe_curve_points(db, system, backend, models, runs)


def write_curves(path: Path, curves: list[Row]) -> None:
    """``moe_curve_points.csv``: the curve rows, then the DeepEP rows ``extract_moe_points.py``
    added to the file (kept as they are)."""
    deepep: list[dict[str, str]] = []
    if path.exists():
        with path.open(newline="") as fh:
            deepep = [r for r in csv.DictReader(fh) if r["kernel_source"].startswith("deepepmoe_")]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(curves[0]), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(curves)
        writer.writerows(deepep)


def extract(
    db: Path, systems: Iterable[str] | None = None
) -> tuple[dict[str, list[Row]], dict[str, dict[str, Any]], list[Row]]:
    """The rows of every points file, by file stem; the kernel tables (``gemm`` and
    ``allreduce``, each by ``system/backend``); the MoE curve points."""
    systems = [s for s in (systems or list_systems()) if (db / s).is_dir()]
    models = catalog_moe_shapes()
    files: dict[str, list[Row]] = {}
    curves: list[Row] = []
    gemm_tables: dict[str, dict[str, list[float | None]]] = {}
    allreduce_tables: dict[str, dict[str, dict[str, list[float]]]] = {}
    for system in systems:
        gemms = {backend: gemm_rows(db, system, backend) for backend in BACKENDS}
        # vLLM's block-fp8 rows are a harness cost (SKIPPED): its tables take SGLang's DeepGEMM.
        if "fp8_block" in gemms["sglang"]:
            gemms["vllm"].setdefault("fp8_block", gemms["sglang"]["fp8_block"])
        for backend in BACKENDS:
            gemm_tables[f"{system}/{backend}"] = {d: gemm_table(r) for d, r in gemms[backend].items()}
            parts = {
                "gemm_points": gemm_points(gemms[backend], system, backend),
                "context_attention_points": attention_points(db, system, backend, "context"),
                "generation_attention_points": attention_points(db, system, backend, "generation"),
                "context_mla_points": mla_points(db, system, backend, "context"),
                "generation_mla_points": mla_points(db, system, backend, "generation"),
                "moe_points": moe_points(db, system, backend, models),
                "allreduce_points": allreduce_points(db, system, backend),
            }
            for stem, rows in parts.items():
                files.setdefault(stem, []).extend(rows)
            allreduce_tables[f"{system}/{backend}"] = allreduce_table(parts["allreduce_points"])
            curves.extend(curve_rows(db, system, backend, models))
            print(f"{system:10s} {backend:6s} " + " ".join(f"{k[:-7]}={len(v)}" for k, v in parts.items()))
        files.setdefault("nccl_points", []).extend(nccl_points(db, system))
    return files, {"gemm": gemm_tables, "allreduce": allreduce_tables}, curves


def _format(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


def write(files: dict[str, list[Row]], out: Path) -> None:
    """One CSV per family; the (version, kernel) each group was measured with goes, once per
    group, to ``kernel_sources.csv`` rather than on every row."""
    out.mkdir(parents=True, exist_ok=True)
    sources: set[tuple[str, ...]] = set()
    for stem, rows in files.items():
        public = [k for k in (rows[0] if rows else {"system": 0}) if not k.startswith("_")]
        with (out / f"{stem}.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=public, extrasaction="ignore")
            writer.writeheader()
            writer.writerows({k: _format(v) for k, v in row.items()} for row in rows)
        for row in rows:
            dtype = row.get("dtype") or row.get("moe_dtype") or row.get("kv_dtype") or row.get("op", "")
            group = (stem, row["system"], row.get("backend", "nccl"), dtype, row["_version"], row["_kernel"])
            sources.add(tuple(str(v) for v in group))
    with (out / "kernel_sources.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["file", "system", "backend", "dtype", "version", "kernel_source"])
        writer.writerows(sorted(sources))


def write_kernel_tables(kernel_tables: dict[str, dict[str, Any]], path: Path) -> None:
    """The bundled tables, compact JSON (see ``aisimulate/perf/kernel_tables.py``)."""
    payload = {
        "attribution": "Contains performance data from NVIDIA AIConfigurator, Apache-2.0",
        "provenance": (
            "benchmarks/extract_kernel_points.py: aiconfigurator-core 0.12.0 systems/data/<system>/gemm/"
            "<backend>/<version>/gemm_perf, fastest kernel per shape; comm/<backend>/<version>/"
            "custom_allreduce_perf (kernel_sources.csv)"
        ),
        "m": list(TABLE_M),
        "nk": list(TABLE_NK),
        "latency_ms": kernel_tables["gemm"],
        "allreduce": kernel_tables["allreduce"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, sort_keys=True, separators=(",", ":")) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=None, help="AIConfigurator's systems/data directory")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tables-out", type=Path, default=DEFAULT_TABLES)
    parser.add_argument("--curves-out", type=Path, default=DEFAULT_CURVES)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated system names")
    parser.add_argument(
        "--curves-only", action="store_true", help="rewrite the MoE curve points only (--curves-out)"
    )
    args = parser.parse_args()
    db = args.db or default_db()
    if args.curves_only:
        models = catalog_moe_shapes()
        systems = [s for s in args.systems.split(",") if (db / s).is_dir()]
        curves = [row for s in systems for b in BACKENDS for row in curve_rows(db, s, b, models)]
        write_curves(args.curves_out, curves)
        print(f"{args.curves_out}: {len(curves)} curve rows")
        return
    files, kernel_tables, curves = extract(db, args.systems.split(","))
    write(files, args.out)
    write_curves(args.curves_out, curves)
    write_kernel_tables(kernel_tables, args.tables_out)
    print(", ".join(f"{stem}: {len(rows)}" for stem, rows in files.items()))


if __name__ == "__main__":
    main()
