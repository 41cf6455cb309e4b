"""Measured single-kernel points and what the analytic kernels predict for them.

The calibration script fits ``Calibration`` constants by minimising the log error of these
predictions; the accuracy benchmark and the tests report it. Each family is predicted by the very
cost objects the analytic model sums over layers, with the geometry of the measured kernel.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aisimulate.catalog.dtypes import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM, math_dtype
from aisimulate.catalog.models import get_model, list_models
from aisimulate.catalog.systems import System, get_system
from aisimulate.perf.calibration import calibration_for, gemm_fit_key, moe_curve_key, moe_fit_key
from aisimulate.perf.kernels import (
    AttentionFit,
    CollectiveFit,
    GemmFit,
    MoeFit,
    all_reduce,
    all_to_all,
    context_attention,
    gemm_roofline,
    generation_attention,
    mla_context_math,
    moe_block,
)

FAMILIES = (
    "gemm",
    "context_attention",
    "context_mla",
    "generation_attention",
    "moe",
    "allreduce",
    "alltoall",
)

# MoE kernels are measured twice: with tokens spread evenly over the experts and with a
# power-law skew. A served model's router is skewed (popular experts get more tokens), and
# AIConfigurator prices MoE models with the same power law (alpha 1.2) by default; the balanced
# points are a best case real traffic does not reach, so the fits see the skewed ones only.
MOE_ROUTING = "power_law_1.2"


def routing(alpha: float) -> str:
    """AIConfigurator's name of the power-law distribution of skew ``alpha``."""
    return f"power_law_{alpha}"


@functools.cache
def _geometry_routing() -> dict[tuple[int, int, int, int], str]:
    """(hidden, expert width, top-k, experts) of every catalog MoE model -> its routing skew."""
    out: dict[tuple[int, int, int, int], str] = {}
    for name in list_models():
        m = get_model(name)
        if m.is_moe:
            geometry = (m.hidden_size, m.moe_intermediate_size, m.experts_per_token, m.num_experts)
            if out.setdefault(geometry, routing(m.moe_routing_alpha)) != routing(m.moe_routing_alpha):
                raise ValueError(f"catalog MoE models of expert shape {geometry} route at different skews")
    return out


def curve_routing(shape: tuple[str, int, int, int, int]) -> str:
    """The routing skew a measured MoE curve of this (format, hidden, width, top-k, experts) is
    taken at: that of the catalog model with these experts (``ModelSpec.moe_routing_alpha``,
    AIConfigurator's model of the architecture), every curve family of it alike; a shape no
    catalog model has takes the generic skew. At DeepSeek's 1.01 against 1.2 one expert-parallel
    rank is less overloaded at wide splits (NVFP4 on gb200, EP32, 512 tokens: 0.065 against 0.093
    ms a layer) and more experts are read at narrow ones (EP8, 32 tokens: 0.088 against 0.080)."""
    return _geometry_routing().get(shape[1:], MOE_ROUTING)


def curve_routings() -> frozenset[str]:
    """Every skew a measured MoE curve is taken at."""
    return frozenset({MOE_ROUTING, *_geometry_routing().values()})


_DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "mxfp4": "mxfp4",
    "half": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "w4a16_mxfp4": "mxfp4",
    "w4a8_mxfp4_mxfp8": "mxfp4_mxfp8",
    "mxfp4_mxfp8": "mxfp4_mxfp8",
    "nvfp4": "nvfp4",
}
_ALLREDUCE_KERNELS = {"vllm": "vLLM_custom_graph", "trtllm": "TRTLLM"}


@dataclass(frozen=True, slots=True)
class Point:
    """One measurement: which fit it calibrates (family, system, backend, dtype) and the row."""

    family: str
    system: str
    backend: str
    dtype: str
    measured_ms: float
    row: dict[str, str]

    @property
    def group(self) -> tuple[str, str, str, str]:
        return self.family, self.system, self.backend, self.dtype


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="") as fh:
        yield from csv.DictReader(fh)


# MoE shapes whose measured curves price the analytic model by default (DeepSeek-V3/R1's experts,
# and gpt-oss's as TRT-LLM runs them on Blackwell: W4A8, which no fit covers); the other catalog
# shapes' curves are measured kernel tables, behind the ``kernel_tables`` switch.
DEFAULT_CURVE_SHAPES = frozenset(
    {
        ("fp8_block", 7168, 2048, 8, 256),
        ("nvfp4", 7168, 2048, 8, 256),
        ("mxfp4_mxfp8", 2880, 2880, 4, 128),
        ("mxfp4_mxfp8", 2880, 2880, 4, 32),
    }
)


def is_default_curve(point: Point) -> bool:
    """Whether this curve point belongs to a shape priced by its curve by default."""
    r = point.row
    shape = (point.dtype, *(_i(r, c) for c in ("hidden", "inter", "topk", "num_experts")))
    return shape in DEFAULT_CURVE_SHAPES


def load_curve_points(data_dir: str | Path) -> list[Point]:
    """MoE kernels measured densely for one model's expert shape on many systems and backends
    (``moe_curve_points.csv``): the analytic model interpolates them on their own system and
    backend (``moe_curves``); no fit sees them."""
    points: list[Point] = []
    for row in _rows(Path(data_dir) / "moe_curve_points.csv"):
        dtype = _DTYPES[row["moe_dtype"]]
        shape = (dtype, _i(row, "hidden"), _i(row, "inter"), _i(row, "topk"), _i(row, "num_experts"))
        if row["distribution"] == curve_routing(shape):
            points.append(Point("moe", row["system"], row["backend"], dtype, float(row["latency_ms"]), row))
    return points


def load_points(data_dir: str | Path) -> list[Point]:
    """Every kernel point under ``data_dir`` (the ``*_points.csv`` files)."""
    data_dir = Path(data_dir)
    points: list[Point] = []
    for family in ("gemm", "context_attention", "generation_attention", "moe"):
        for row in _rows(data_dir / f"{family}_points.csv"):
            if family == "moe" and row["distribution"] != MOE_ROUTING:
                continue
            dtype = _DTYPES[row.get("dtype") or row.get("moe_dtype") or "bfloat16"]
            points.append(Point(family, row["system"], row["backend"], dtype, float(row["latency_ms"]), row))
    # TRT-LLM's MLA prefill kernels (``benchmarks/extract_mla_points.py``), grouped by KV format.
    for row in _rows(data_dir / "context_mla_points.csv"):
        points.append(
            Point(
                "context_mla", row["system"], row["backend"], row["kv_dtype"], float(row["latency_ms"]), row
            )
        )
    for row in _rows(data_dir / "allreduce_points.csv"):
        if row["kernel_source"] == _ALLREDUCE_KERNELS.get(row["backend"]):
            points.append(
                Point("allreduce", row["system"], row["backend"], "bf16", float(row["latency_ms"]), row)
            )
    for row in _rows(data_dir / "nccl_points.csv"):
        if row["op"] == "alltoall":
            for backend in ("vllm", "trtllm"):
                points.append(
                    Point("alltoall", row["system"], backend, "bf16", float(row["latency_ms"]), row)
                )
    return points


# The systems whose whole kernel database is sampled in ``benchmarks/data/kernel_db``.
DATABASE_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
_HELD_OUT_FILES = {
    "gemm": "gemm_points.csv",
    "context_attention": "context_attention_points.csv",
    "generation_attention": "generation_attention_points.csv",
    "moe": "moe_points.csv",
    "allreduce": "allreduce_points.csv",
    "context_mla": "context_mla_points.csv",
    "generation_mla": "generation_mla_points.csv",
}
# Columns that name one measured configuration of each family (besides system and backend).
_GEOMETRY = {
    "gemm": ("m", "n", "k"),
    "context_attention": ("batch", "isl", "num_heads", "num_kv_heads", "head_dim"),
    "generation_attention": ("batch", "kv_len", "num_heads", "num_kv_heads", "head_dim"),
    "moe": ("num_tokens", "hidden", "inter", "topk", "num_experts", "moe_tp", "moe_ep"),
    "allreduce": ("num_gpus", "message_elements"),
    "alltoall": ("num_gpus", "message_elements"),
    "context_mla": ("batch", "isl", "num_heads"),
    "generation_mla": ("batch", "kv_len", "num_heads"),
}
# The MLA kernels were measured on DeepSeek-V3's geometry (heads per GPU vary).
MLA_KV_LORA_RANK, MLA_ROPE_DIM, MLA_NOPE_DIM, MLA_V_DIM = 512, 64, 128, 128


def point_key(point: Point) -> tuple[str, ...]:
    """What makes two points the same measurement (to keep fitted points out of a held-out set)."""
    geometry = tuple(str(_i(point.row, c)) for c in _GEOMETRY[point.family])
    return (*point.group, *geometry)


def load_database_points(data_dir: str | Path, systems: tuple[str, ...] = DATABASE_SYSTEMS) -> list[Point]:
    """The sample of every system's whole kernel database (``benchmarks/extract_kernel_points.py``
    layout): attention over a bf16 KV cache, MoE under power-law routing, each backend's custom
    all-reduce, NCCL's all-to-all (every backend runs it)."""
    data_dir = Path(data_dir)
    points: list[Point] = []
    for family, name in _HELD_OUT_FILES.items():
        for row in _rows(data_dir / name):
            if row["system"] not in systems or row.get("kv_dtype", "bf16") != "bf16":
                continue
            dtype = _DTYPES[row.get("dtype") or row.get("moe_dtype") or "bfloat16"]
            points.append(Point(family, row["system"], row["backend"], dtype, float(row["latency_ms"]), row))
    for row in _rows(data_dir / "nccl_points.csv"):
        if row["system"] in systems and row["op"] == "alltoall":
            for backend in ("vllm", "trtllm", "sglang"):
                measured_ms = float(row["latency_ms"])
                points.append(Point("alltoall", row["system"], backend, "bf16", measured_ms, row))
    return points


def _i(row: dict[str, str], key: str) -> int:
    return int(float(row[key]))


def predict(point: Point, fit: Any, system: System | None = None) -> float:
    """Latency the kernel model gives this point under ``fit`` (the family's fit dataclass)."""
    system = system or get_system(point.system)
    row = point.row
    if point.family == "gemm":
        m, n, k = _i(row, "m"), _i(row, "n"), _i(row, "k")
        math = math_dtype(point.dtype, system.math_dtypes)
        roof = gemm_roofline(
            weight_params=n * k,
            act_elems_per_token=n + k,
            weight_bytes_per_param=WEIGHT_BYTES_PER_PARAM[point.dtype],
            peak_tflops=system.tflops[math],
            hbm_gbps=system.hbm_gbps,
            fit=fit,
            reduction_k=k,
        )
        gemm_ms: float = roof.time_ms(m)
        return gemm_ms
    if point.family in ("context_mla", "generation_mla"):
        return _predict_mla(point, fit, system)
    if point.family in ("context_attention", "generation_attention"):
        heads, kv_heads, head_dim = _i(row, "num_heads"), _i(row, "num_kv_heads"), _i(row, "head_dim")
        batch = _i(row, "batch")
        common = dict(
            num_layers=1,
            num_heads=heads,
            kv_bytes_per_token_layer=2 * kv_heads * head_dim * 2,
            peak_tflops=system.tflops["bf16"],
            hbm_gbps=system.hbm_gbps,
            fit=fit,
        )
        if point.family == "context_attention":
            isl = _i(row, "isl")
            prefill = context_attention(qk_dim=head_dim, v_dim=head_dim, **common)
            prefill_ms: float = prefill.time_ms(batch * isl * (isl + 1) / 2, batch, 0, batch * isl)
            return prefill_ms
        kv_len = _i(row, "kv_len")
        decode = generation_attention(flops_per_context_token_layer=4 * heads * head_dim, **common)
        decode_ms: float = decode.time_ms(batch, batch * kv_len, 1.0)
        return decode_ms
    if point.family == "moe":
        math = math_dtype(point.dtype, system.math_dtypes)
        block = moe_block(
            num_layers=1,
            hidden_size=_i(row, "hidden"),
            expert_intermediate=_i(row, "inter"),
            num_experts=_i(row, "num_experts"),
            top_k=_i(row, "topk"),
            moe_tp=_i(row, "moe_tp"),
            moe_ep=_i(row, "moe_ep"),
            weight_bytes_per_param=WEIGHT_BYTES_PER_PARAM[point.dtype],
            peak_tflops=system.tflops[math],
            hbm_gbps=system.hbm_gbps,
            fit=fit,
        )
        moe_ms: float = block.time_ms(_i(row, "num_tokens"))
        return moe_ms
    n = _i(row, "num_gpus")
    size = float(row["message_bytes"]) if "message_bytes" in row else _i(row, "message_elements") * 2.0
    builder: Callable[..., Any] = all_reduce if point.family == "allreduce" else all_to_all
    collective = builder(count=1, num_gpus=n, bytes_per_token=size, link_gbps=system.nvlink_gbps, fit=fit)
    comm_ms: float = collective.time_ms(1)
    return comm_ms


def _predict_mla(point: Point, fit: Any, system: System) -> float:
    """MLA as the analytic model prices it: prefill over the full q/k (nope + rope) and v heads,
    decode absorbed (scores against the latent + rope key, values in the latent), reading the
    latent + rope cache."""
    row = point.row
    heads, batch = _i(row, "num_heads"), _i(row, "batch")
    kv = row.get("kv_dtype", "bf16")
    common = dict(
        num_layers=1,
        num_heads=heads,
        kv_bytes_per_token_layer=(MLA_KV_LORA_RANK + MLA_ROPE_DIM) * KV_BYTES_PER_ELEMENT[kv],
        peak_tflops=system.tflops[mla_context_math(kv, system.math_dtypes)],
        hbm_gbps=system.hbm_gbps,
        fit=fit,
    )
    if point.family == "context_mla":
        isl = _i(row, "isl")
        prefill = context_attention(qk_dim=MLA_NOPE_DIM + MLA_ROPE_DIM, v_dim=MLA_V_DIM, **common)
        prefill_ms: float = prefill.time_ms(batch * isl * (isl + 1) / 2, batch, 0, batch * isl)
        return prefill_ms
    flops = 2 * heads * (2 * MLA_KV_LORA_RANK + MLA_ROPE_DIM)
    decode = generation_attention(flops_per_context_token_layer=flops, **common)
    decode_ms: float = decode.time_ms(batch, batch * _i(row, "kv_len"), 1.0)
    return decode_ms


FIT_TYPES: dict[str, type] = {
    "gemm": GemmFit,
    "context_attention": AttentionFit,
    "context_mla": AttentionFit,
    "generation_attention": AttentionFit,
    "moe": MoeFit,
    "allreduce": CollectiveFit,
    "alltoall": CollectiveFit,
}


# A shape measured at fewer token counts is left to the fit: interpolating across 8x gaps in
# tokens is no better than the smooth curve.
MIN_CURVE_POINTS = 8


def moe_a2a(row: dict[str, str]) -> str:
    """The all-to-all path a measured MoE row's kernel runs under: ``deepep`` for SGLang's DeepEP
    expert kernels (``benchmarks/extract_moe_points.py``), ``none`` for every other kernel."""
    return "deepep" if row.get("kernel_source", "").startswith("deepepmoe") else "none"


def moe_curves(points: list[Point]) -> dict[tuple[str, str], dict[str, dict[str, list[float]]]]:
    """The measured MoE shapes the analytic model interpolates, per (system, backend): one layer's
    latency by token count for each ``moe_curve_key``."""
    grouped: dict[tuple[str, str, str], dict[float, float]] = {}
    for p in points:
        if p.family != "moe":
            continue
        r = p.row
        key = moe_curve_key(
            p.dtype,
            _i(r, "hidden"),
            _i(r, "inter"),
            _i(r, "topk"),
            _i(r, "num_experts"),
            _i(r, "moe_tp"),
            _i(r, "moe_ep"),
            moe_a2a(r),
        )
        grouped.setdefault((p.system, p.backend, key), {})[float(_i(r, "num_tokens"))] = p.measured_ms
    out: dict[tuple[str, str], dict[str, dict[str, list[float]]]] = {}
    for (system, backend, key), by_tokens in sorted(grouped.items()):
        if len(by_tokens) >= MIN_CURVE_POINTS:
            tokens = sorted(by_tokens)
            out.setdefault((system, backend), {})[key] = {
                "tokens": tokens,
                "per_layer_ms": [by_tokens[t] for t in tokens],
            }
    return out


def fit_key(point: Point, system: System) -> str:
    """The entry of a per-dtype family (gemm, moe) this point is fitted into."""
    math = math_dtype(point.dtype, system.math_dtypes)
    if point.family == "moe":
        return moe_fit_key(point.dtype, math)
    return gemm_fit_key(point.dtype, math)


def calibrated_fit(point: Point) -> Any:
    """The shipped calibration's fit for this point's family, system, backend and dtype."""
    system = get_system(point.system)
    cal = calibration_for(system, point.backend)
    math = math_dtype(point.dtype, system.math_dtypes)
    if point.family == "gemm":
        return cal.gemm_fit(math, point.dtype)
    if point.family == "moe":
        return cal.moe_fit(point.dtype, math)
    # MLA kernels are priced with the system's MLA prefill fit where it has one, else with the
    # attention fits, as the analytic model does.
    if point.family == "context_mla" and point.dtype in cal.context_mla:
        return cal.context_mla[point.dtype]
    return getattr(cal, point.family.replace("_mla", "_attention"))


def relative_errors(points: list[Point]) -> dict[tuple[str, str], list[float]]:
    """|predicted / measured - 1| of each point under the shipped calibration, by (family, system)."""
    out: dict[tuple[str, str], list[float]] = {}
    for point in points:
        error = abs(float(predict(point, calibrated_fit(point))) / point.measured_ms - 1.0)
        out.setdefault((point.family, point.system), []).append(error)
    return out


# Median |error| each family must stay within (the targets of the calibration issue).
TARGETS = {
    "gemm": 0.10,
    "context_attention": 0.15,
    "context_mla": 0.15,
    "generation_attention": 0.15,
    "allreduce": 0.20,
    "alltoall": 0.20,
    "moe": 0.20,
}
