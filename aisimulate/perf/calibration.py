"""Fitted efficiency constants of the analytic model, read from the bundled data file.

``perf/data/calibration.json`` is written by ``benchmarks/calibrate_perf.py`` from measured
kernel data. A system without its own measurements borrows the fit of the closest measured
generation (efficiencies are fractions of each chip's own peak, so they transfer); a system with
some of its own (an ``nvfp4`` GEMM fit, say) keeps those and borrows the rest. SGLang borrows
vLLM's kernel fits. The chosen entries are named in ``Calibration.source``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.dtypes import NATIVE_MATH
from aisimulate.catalog.systems import System
from aisimulate.perf.kernels import AttentionFit, CollectiveFit, GemmFit, MoeFit, OverheadFit

DATA_FILE = "calibration.json"

# Weight formats whose MoE kernels are measured apart from their math dtype's: MXFP4 experts run
# weight-only kernels on chips without FP4 math (4-bit reads, bf16 math), unlike any bf16 or fp8
# kernel, and Blackwell's MXFP4 kernels are their own too (TRT-LLM's W4A8 ``mxfp4_mxfp8`` ones
# apart from the weight-only ones).
MOE_FORMAT_FITS = frozenset({"mxfp4", "mxfp4_mxfp8"})
# Weight formats whose GEMMs are measured apart from their math dtype's: block-scaled FP8
# (DeepSeek-class checkpoints) runs its own kernels (DeepGEMM and kin), launched at a fraction of
# per-tensor FP8's fixed cost; NVFP4 on FP4 tensor cores runs its own too (an activation quantise
# step, and a fixed cost above bf16's on TRT-LLM). The database has no MXFP4 GEMM.
GEMM_FORMAT_FITS = frozenset({"fp8_block", "nvfp4"})


def gemm_fit_key(weight_dtype: str, math_dtype: str) -> str:
    """The ``gemm`` entry a weight format's linear layers are priced with (and fitted into): its
    own where it runs its own math (not NVFP4 dequantised on Hopper)."""
    if weight_dtype in GEMM_FORMAT_FITS and NATIVE_MATH[weight_dtype] == math_dtype:
        return weight_dtype
    return "fp8" if math_dtype == "fp8" else "bf16"


def moe_fit_key(weight_dtype: str, math_dtype: str) -> str:
    """The ``moe`` entry a weight format's experts are priced with (and fitted into)."""
    if weight_dtype in MOE_FORMAT_FITS:
        return weight_dtype
    return "fp8" if math_dtype == "fp8" else "bf16"


def moe_curve_key(
    weight_dtype: str,
    hidden: int,
    inter: int,
    top_k: int,
    num_experts: int,
    moe_tp: int,
    moe_ep: int,
    a2a: str = "none",
) -> str:
    """Names one measured MoE kernel shape: experts' weight format, geometry and split, and the
    all-to-all path whose own expert kernels were measured (SGLang's ``deepep``; ``none``: the
    backend's default MoE kernel)."""
    key = f"{weight_dtype}/h{hidden}/i{inter}/top{top_k}of{num_experts}/tp{moe_tp}ep{moe_ep}"
    return key if a2a == "none" else f"{key}/{a2a}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibration:
    source: str
    gemm: dict[str, GemmFit]
    context_attention: AttentionFit
    generation_attention: AttentionFit
    moe: dict[str, MoeFit]
    allreduce: CollectiveFit
    alltoall: CollectiveFit
    overhead: OverheadFit
    # Measured MoE latencies per kernel shape (``moe_curve_key``): (tokens, one layer's ms),
    # measured on this very system and backend (a stand-in's are never borrowed).
    moe_curves: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    # The other catalog MoE shapes' measured curves, same layout: measured kernel tables, used
    # with the analytic model's ``kernel_tables`` switch on.
    catalog_moe_curves: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    # MLA prefill attention by KV-cache format, fitted on the system's own measured MLA context
    # kernels (TRT-LLM's; DeepSeek-V3's geometry); a model or format without one takes
    # ``context_attention``, fitted on GQA heads of 128 dimensions.
    context_mla: dict[str, AttentionFit] = field(default_factory=dict)

    def gemm_fit(self, math_dtype: str, weight_dtype: str | None = None) -> GemmFit:
        """The format's own fit when one was measured, else the math dtype's."""
        own = None
        if weight_dtype in GEMM_FORMAT_FITS and gemm_fit_key(weight_dtype, math_dtype) == weight_dtype:
            own = self.gemm.get(weight_dtype)
        return own or self.gemm.get(math_dtype) or self.gemm.get("fp8") or self.gemm["bf16"]

    def moe_fit(self, weight_dtype: str, math_dtype: str) -> MoeFit:
        """The format's own fit when one was measured, else the math dtype's."""
        own = self.moe.get(moe_fit_key(weight_dtype, math_dtype))
        return own or self.moe.get(math_dtype) or self.moe.get("fp8") or self.moe["bf16"]


@functools.cache
def _data() -> dict[str, Any]:
    path = resources.files("aisimulate.perf") / "data" / DATA_FILE
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def write_calibration_data(path: Path, data: dict[str, Any]) -> None:
    """Write the data file's layout compactly: the measured MoE curves are tens of thousands of
    numbers, and both calibration scripts rewrite the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")


def reload_calibration() -> None:
    """Forget the cached data file: the end-to-end calibration rewrites it between its rounds."""
    _data.cache_clear()


def _make(cls: type, values: dict[str, Any] | None) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in (values or {}).items() if k in names})


def proxy_system(system: System) -> str:
    """The measured system whose efficiencies stand in for an unmeasured one."""
    return "b200_sxm" if system.sm_version >= 100 else "h100_sxm"


def calibration_from_entry(
    entry: dict[str, Any],
    overhead: dict[str, Any] | None,
    source: str,
    curves: dict[str, Any] | None = None,
    catalog_curves: dict[str, Any] | None = None,
) -> Calibration:
    """Build a :class:`Calibration` from one ``fits`` entry of the data file's layout and the
    MoE curves measured on the system itself (``moe_curves`` of the data file)."""
    curves = curves or {}
    return Calibration(
        source=source,
        gemm={k: _make(GemmFit, v) for k, v in entry["gemm"].items()},
        context_attention=_make(AttentionFit, entry.get("context_attention")),
        generation_attention=_make(AttentionFit, entry.get("generation_attention")),
        moe={k: _make(MoeFit, v) for k, v in entry.get("moe", {"bf16": {}}).items()},
        allreduce=_make(CollectiveFit, entry.get("allreduce")),
        alltoall=_make(CollectiveFit, entry.get("alltoall")),
        overhead=_make(OverheadFit, overhead),
        moe_curves=_curves(curves),
        catalog_moe_curves=_curves(catalog_curves or {}),
        context_mla={k: _make(AttentionFit, v) for k, v in entry.get("context_mla", {}).items()},
    )


def _curves(curves: dict[str, Any]) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    return {k: (tuple(v["tokens"]), tuple(v["per_layer_ms"])) for k, v in curves.items()}


def calibration_for(system: System, backend: str) -> Calibration:
    data = _data()
    fits = data["fits"]
    kernel_backend = backend_profile(backend).kernel_backend
    key = f"{system.name}/{kernel_backend}"
    source = key
    own_fits = fits.get(key, {})
    entry = own_fits
    if "context_attention" not in own_fits:
        # No kernel fits of its own, or only some (a format's GEMM fit): the closest measured
        # generation's fill in the rest.
        stand_in = f"{proxy_system(system)}/{kernel_backend}"
        entry = {**fits[stand_in], "gemm": {**fits[stand_in]["gemm"], **own_fits.get("gemm", {})}}
        if "context_mla" in own_fits:
            entry["context_mla"] = own_fits["context_mla"]
        owned = ", ".join(
            [f"gemm {k}" for k in sorted(own_fits.get("gemm", {}))]
            + [f"context_mla {k}" for k in sorted(own_fits.get("context_mla", {}))]
        )
        source = f"{stand_in} (stand-in for {system.name}" + (f"; own {owned}: {key})" if owned else ")")
    overhead = data.get("overhead", {}).get(backend)

    # Curves are the system's own measurements: those of the backend whose kernel fits it
    # borrows, overridden shape by shape by the serving backend's own (SGLang runs other MoE
    # kernels than vLLM).
    def own(entry: str) -> dict[str, Any]:
        measured = data.get(entry, {})
        return {
            **measured.get(f"{system.name}/{kernel_backend}", {}),
            **measured.get(f"{system.name}/{backend}", {}),
        }

    return calibration_from_entry(entry, overhead, source, own("moe_curves"), own("moe_catalog_curves"))


# Measured kernel tables (GEMM tables, the catalog's MoE curves) are off by default: on the
# development serving runs they did not improve every headline median (docs/perf.md).
KERNEL_TABLES_BY_DEFAULT = False
# Weight formats whose linear layers are priced from the measured GEMM tables even with the switch
# off: NVFP4's latency at decode sizes depends on the weight shape beyond what the roofline fit
# describes (narrow outputs run long reductions: 11-13% in sample, against 4-5% held out for the
# tables, docs/perf.md); the fit prices them where a system has no table.
GEMM_TABLES_BY_DEFAULT = frozenset({"nvfp4"})


def e2e_fitted_models() -> tuple[str, ...]:
    """Models whose end-to-end measurements the per-pass overheads were fitted on; a fidelity
    report keeps their rows apart from the held-out ones."""
    return tuple(_data().get("e2e_fit", {}).get("models", ()))


def e2e_osl_spread(backend: str) -> float:
    """Relative output-length spread that desynchronises a replayed closed loop the way the
    measured servers of ``backend`` were (0: lock-step waves); see ``aisimulate.fidelity``."""
    return float(_data().get("e2e_fit", {}).get("osl_spread", {}).get(backend, 0.0))


def e2e_frontend_latency_ms(backend: str) -> float:
    """Per-request latency outside the engine (client, HTTP, tokenisation) that the measured
    TTFTs of ``backend`` carry on top of the replayed engine; see ``aisimulate.fidelity``."""
    return float(_data().get("e2e_fit", {}).get("frontend_latency_ms", {}).get(backend, 0.0))
