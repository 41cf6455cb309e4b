"""The optional AIConfigurator backend (``perf: aic``): its per-iteration latency behind our protocol.

Every ``aiconfigurator_core`` import lives in this module and happens on first use, so the rest
of the project runs without the extra. A pass is answered from AIConfigurator's own calls:

* prefill chunks: ``predict_prefill_latency(requests, context + new, context)`` with the mean
  chunk, as Dynamo's mocker calls it;
* decode only: ``predict_decode_latency(requests, mean context, osl=2)``, one generation step;
* both in one pass: the prefill call, plus the decode attention and the extra non-attention
  cost of the decode tokens, both read off ``mixed_step_breakdown`` (AIConfigurator's own
  mixed step ties the decode context to the prefill length, which a replay must not).

A call costs 2-100 us, so answers are memoised on bucketed arguments: lengths above 64 tokens
snap to a grid of 1/32 relative spacing (about 3 %), request counts stay exact. Bucketing is
monotone, so it adds no dips of its own to AIConfigurator's curves.
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.models import ModelSpec, publisher_config
from aisimulate.catalog.systems import System
from aisimulate.errors import ConfigError
from aisimulate.perf.memory import check_backend
from aisimulate.perf.model import (
    BatchArrays,
    BatchShape,
    PassBreakdown,
    SpelledOutDecodeTimes,
    time_ms_pricer,
)
from aisimulate.perf.shape import ParallelShape, check_shape

INSTALL_HINT = 'perf: aic needs the optional AIConfigurator backend: pip install "aisimulate[aic]"'
_EXACT_BELOW = 64  # lengths up to this many tokens are not bucketed
_GRID_BITS = 5  # 2**5 = 32 grid points per doubling


def bucket_tokens(tokens: float) -> int:
    """Snap a token count to the memo grid (exact up to 64, then 1/32 relative spacing)."""
    n = int(tokens + 0.5)
    if n <= _EXACT_BELOW:
        return n
    step = 1 << (n.bit_length() - 1 - _GRID_BITS)
    return (n + step // 2) // step * step


def bucket_tokens_array(tokens: np.ndarray) -> np.ndarray:
    """:func:`bucket_tokens` on an array."""
    n = np.floor(np.asarray(tokens, dtype=np.float64) + 0.5).astype(np.int64)
    bits = np.floor(np.log2(np.maximum(n, 1))).astype(np.int64)
    step = np.left_shift(1, np.maximum(bits - _GRID_BITS, 0))
    return np.where(n <= _EXACT_BELOW, n, (n + step // 2) // step * step)


def _aic() -> Any:
    try:
        from aiconfigurator_core.sdk import engine
    except ImportError:
        raise ConfigError(INSTALL_HINT, where="perf") from None
    return engine


@contextmanager
def _quiet_aic_logs() -> Iterator[None]:
    """AIConfigurator logs a warning per fallback data file while loading; a replay shows none."""
    logger = logging.getLogger("aiconfigurator_core")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True, kw_only=True, slots=True)
class AicModel:
    """What AIConfigurator loads for one of our models, and the quantisation it must be told."""

    path: str  # an HF id it bundles, or a folder holding our config.json
    gemm_quant: str | None = None  # None: what the config declares
    moe_quant: str | None = None


def resolve_aic_model(model: ModelSpec) -> AicModel | None:
    """AIConfigurator's bundled config under one of the checkpoint's names, else our bundled
    publisher config written to a folder; a quantised variant found only under its base model's
    names gets its weight format passed explicitly. None for local files: AIConfigurator would
    otherwise try to download them."""
    entry = publisher_config(model.name)
    if entry is None:
        return None
    quant = _variant_quant(model) if entry.variant else {}
    bundled = Path(_aic().__file__).parent.parent / "model_configs"
    for i, name in enumerate(entry.names):
        if "/" in name and (bundled / f"{name.replace('/', '--')}_config.json").is_file():
            return AicModel(path=name, **(quant if i else {}))
    base_name = entry.names[1 if entry.variant else 0]
    return AicModel(path=str(_config_folder(base_name, json.dumps(entry.config))), **quant)


def _variant_quant(model: ModelSpec) -> dict[str, str | None]:
    """Our weight formats (fp8, fp8_block, nvfp4) carry AIConfigurator's names for them."""
    if model.quant_scope == "experts":
        return {"moe_quant": model.weight_dtype}
    return {"gemm_quant": model.weight_dtype, "moe_quant": model.weight_dtype if model.is_moe else None}


@functools.cache
def _config_root() -> tempfile.TemporaryDirectory[str]:
    """This process's scratch folder for model configs; removed when the process exits."""
    return tempfile.TemporaryDirectory(prefix="aisimulate-aic-")


@functools.cache
def _config_folder(name: str, config_json: str) -> Path:
    """One folder per process and model, holding the config AIConfigurator reads."""
    folder = Path(_config_root().name) / name.replace("/", "--")
    folder.mkdir()
    (folder / "config.json").write_text(config_json)
    return folder


@functools.cache
def _engine(
    model_path: str,
    system: str,
    backend: str,
    tp: int,
    pp: int,
    attention_dp: int,
    moe_tp: int,
    moe_ep: int,
    nextn: int,
    gemm_quant: str | None,
    moe_quant: str | None,
    kv_quant: str | None,
    fmha_quant: str | None,
) -> Any:
    """One compiled AIConfigurator engine per worker shape (compiling takes seconds)."""
    engine = _aic()
    try:
        with _quiet_aic_logs():
            return engine.EngineHandle.compile(
                model_path,
                system,
                backend,
                tp_size=tp,
                pp_size=pp,
                attention_dp_size=attention_dp,
                moe_tp_size=moe_tp,
                moe_ep_size=moe_ep,
                nextn=nextn,
                gemm_quant_mode=gemm_quant,
                moe_quant_mode=moe_quant,
                kvcache_quant_mode=kv_quant,
                fmha_quant_mode=fmha_quant,
            )
    except Exception as err:  # the library raises ValueError, KeyError, RuntimeError, ... alike
        raise ConfigError(
            f"perf: aic does not cover {model_path} on {system} with {backend}: {err}", where="perf"
        ) from None


@functools.cache
def _kv_tokens(
    compile_args: tuple[Any, ...],
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> int:
    path, system, backend, tp, pp, attention_dp, moe_tp, moe_ep, nextn, gemm, moe, kv, fmha = compile_args
    try:
        with _quiet_aic_logs():
            from aiconfigurator_core.sdk.memory import estimate_kv_cache
            from aiconfigurator_core.sdk.perf_database import get_latest_database_version

            estimate = estimate_kv_cache(
                path,
                system,
                backend,
                get_latest_database_version(system, backend),
                max_num_tokens=max_num_batched_tokens,
                max_batch_size=max_num_seqs,
                memory_fraction_kind=backend_profile(backend).kv_budget,
                memory_fraction_value=gpu_memory_utilization,
                tp_size=tp,
                pp_size=pp,
                attention_dp_size=attention_dp,
                moe_tp_size=moe_tp,
                moe_ep_size=moe_ep,
                gemm_quant_mode=gemm,
                moe_quant_mode=moe,
                kvcache_quant_mode=kv,
                fmha_quant_mode=fmha,
                nextn=nextn,
            )
    except Exception as err:  # as in _engine: the library's errors have no common type
        raise ConfigError(
            f"perf: aic cannot size the KV cache of {path} on {system}: {err}", where="perf"
        ) from None
    # AIConfigurator prices a token's KV over all layers, not one pipeline stage's (spec perf.md).
    tokens: int = int(estimate["total_kv_size_tokens"]) * pp
    return tokens


class AicPerfModel(SpelledOutDecodeTimes):
    """AIConfigurator's per-iteration latency for one worker shape, memoised on bucketed passes."""

    name = "aic"

    def __init__(
        self,
        model: ModelSpec,
        system: System,
        shape: ParallelShape,
        *,
        backend: str = "vllm",
        kv_cache_dtype: str = "auto",
        nextn: int = 0,
    ) -> None:
        check_backend(backend)
        check_shape(model, shape)
        resolved = resolve_aic_model(model)
        if resolved is None:
            raise ConfigError(
                f"perf: aic has no config for {model.name}: AIConfigurator reads bundled models only",
                where="perf",
            )
        kv_dtype = model.resolve_kv_dtype(kv_cache_dtype, backend)
        moe_tp, moe_ep = shape.expert_split
        # DeepSeek-style attention on trtllm/sglang needs bf16 FMHA (spec perf.md, known quirks).
        fmha = "bfloat16" if model.is_mla and backend in ("trtllm", "sglang") else None
        self._compile_args = (
            resolved.path,
            system.name,
            backend,
            shape.tp,
            shape.pp,
            shape.attention_dp,
            moe_tp,
            moe_ep,
            nextn,
            resolved.gemm_quant,
            resolved.moe_quant,
            "fp8" if kv_dtype == "fp8" else None,
            fmha,
        )
        self._engine = _engine(*self._compile_args)
        self.aic_model = resolved
        self._prefill: dict[tuple[int, int, int], float] = {}
        self._decode: dict[tuple[int, int], tuple[float, float]] = {}
        self._decode_extra_non_attention: dict[tuple[int, int], float] = {}
        self._check_tables()

    def _check_tables(self) -> None:
        """One prefill and one decode call now: a kernel table the engine compiled without (e.g.
        no DSA tables for a system and backend) fails here, as one error, not mid-replay."""
        try:
            with _quiet_aic_logs():
                self._engine.predict_prefill_latency(1, 1024, 0)
                self._engine.predict_decode_latency(1, 1024, 2)
        except Exception as err:  # as in _engine: the library's errors have no common type
            path, system, backend = self._compile_args[:3]
            raise ConfigError(
                f"perf: aic does not cover {path} on {system} with {backend}: {err}", where="perf"
            ) from None

    def kv_tokens_per_rank(
        self, *, gpu_memory_utilization: float, max_num_batched_tokens: int, max_num_seqs: int
    ) -> int:
        """KV capacity of one attention-DP rank by AIConfigurator's memory model (cached per shape;
        a call takes about a second). ``gpu_memory_utilization`` is the backend's own knob: a
        fraction of all memory on vLLM and SGLang, of what is free after the model on TRT-LLM."""
        return _kv_tokens(self._compile_args, gpu_memory_utilization, max_num_batched_tokens, max_num_seqs)

    # ---- memoised AIConfigurator calls ---------------------------------------------------
    def _prefill_ms(self, requests: int, new_tokens: int, context_tokens: int) -> float:
        key = (requests, new_tokens, context_tokens)
        ms = self._prefill.get(key)
        if ms is None:
            ms = self._engine.predict_prefill_latency(requests, new_tokens + context_tokens, context_tokens)
            self._prefill[key] = ms
        return ms

    def _decode_ms(self, requests: int, context_tokens: int) -> tuple[float, float]:
        """(whole decode step, its attention part)."""
        key = (requests, context_tokens)
        out = self._decode.get(key)
        if out is None:
            attention = self._engine.mixed_step_breakdown(0, requests, context_tokens, 2, 0)[3]
            out = (self._engine.predict_decode_latency(requests, context_tokens, 2), attention)
            self._decode[key] = out
        return out

    def _extra_non_attention_ms(self, prefill_tokens: int, decode_requests: int) -> float:
        """What ``decode_requests`` more tokens add to the non-attention work of a prefill pass."""
        key = (prefill_tokens, decode_requests)
        ms = self._decode_extra_non_attention.get(key)
        if ms is None:
            step = self._engine.mixed_step_breakdown
            with_decode = step(prefill_tokens, decode_requests, prefill_tokens, 2, 0)[1]
            ms = max(with_decode - step(prefill_tokens, 0, prefill_tokens, 2, 0)[1], 0.0)
            self._decode_extra_non_attention[key] = ms
        return ms

    # ---- the protocol --------------------------------------------------------------------
    def _parts(
        self,
        prefill_tokens: float,
        prefill_requests: float,
        prefill_context_tokens: float,
        decode_requests: float,
        decode_context_tokens: float,
    ) -> tuple[float, float, float]:
        """(prefill ms, decode attention ms, decode non-attention ms) of one pass."""
        decode = int(decode_requests)
        decode_ctx = bucket_tokens(decode_context_tokens / decode) if decode else 0
        if not prefill_tokens:
            if not decode:
                return 0.0, 0.0, 0.0
            total, attention = self._decode_ms(decode, max(decode_ctx, 1))
            return 0.0, attention, total - attention
        chunks = int(prefill_requests)
        new = max(bucket_tokens(prefill_tokens / chunks), 1)
        prefill = self._prefill_ms(chunks, new, bucket_tokens(prefill_context_tokens / chunks))
        if not decode:
            return prefill, 0.0, 0.0
        attention = self._decode_ms(decode, max(decode_ctx, 1))[1]
        # On the bucketed chunk, so that the vectorised path (which keeps only that) agrees exactly.
        return prefill, attention, self._extra_non_attention_ms(new * chunks, decode)

    def time_ms(
        self,
        prefill_tokens: float,
        prefill_requests: float,
        attention_pairs: float,
        prefill_context_tokens: float,
        decode_requests: float,
        decode_context_tokens: float,
        tokens_per_step: float = 1.0,
        active_kv_tokens: float = 0.0,
        kv_capacity_tokens: float = 0.0,
    ) -> float:
        """Latency of one pass. MTP is compiled into the engine (``nextn``), so
        ``tokens_per_step`` is not read; neither are the KV figures."""
        prefill, attention, non_attention = self._parts(
            prefill_tokens, prefill_requests, prefill_context_tokens, decode_requests, decode_context_tokens
        )
        return prefill + attention + non_attention

    def decode_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[float], float]:
        return time_ms_pricer(self, decode_requests, tokens_per_step, kv_capacity_tokens)

    def explain(self, batch: BatchShape) -> PassBreakdown:
        prefill, attention, non_attention = self._parts(
            batch.prefill_tokens,
            batch.prefill_requests,
            batch.prefill_context_tokens,
            batch.decode_requests,
            batch.decode_context_tokens,
        )
        return PassBreakdown(
            attention_ms=attention,
            unattributed_ms=prefill + non_attention,
            extra={"aic_prefill_ms": prefill},
        )

    def pass_times_ms(self, batches: BatchArrays) -> np.ndarray:
        """Many passes: bucket them all at once, then ask once per distinct bucketed pass."""
        p, r, _, c, d, dc, _ = batches.filled()
        safe_r, safe_d = np.maximum(r, 1), np.maximum(d, 1)
        keys = np.stack(
            [
                bucket_tokens_array(p / safe_r),
                r,
                bucket_tokens_array(c / safe_r) * (r > 0),
                d,
                bucket_tokens_array(dc / safe_d) * (d > 0),
            ],
            axis=1,
        ).astype(np.int64)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        # Bucketed means stand in for the raw sums: re-bucketing a bucketed value is a no-op.
        times = np.array(
            [self.time_ms(pn * pr, pr, 0.0, pc * pr, dr, dc * dr) for pn, pr, pc, dr, dc in unique.tolist()],
            dtype=np.float64,
        )
        return times[inverse.reshape(-1)]

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "aic_model": self.aic_model.path}
