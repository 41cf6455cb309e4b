"""The reference replay's default timing model, reproduced exactly for parity runs.

Dynamo's mocker predicts a prefill pass from the total new tokens alone and a decode pass from
the worker's KV utilisation alone (quadratic), whatever the model or GPU. It is useful to compare
our replay with Dynamo's on equal terms, not to predict real hardware.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aisimulate.perf.model import BatchArrays, BatchShape, PassBreakdown, ScalarPassTimes

# Coefficients from Dynamo's perf_model.rs (see the reference notes, section 1.2).
PREFILL_QUADRATIC = 4.209989e-7
PREFILL_LINEAR = 1.518344e-2
PREFILL_CONSTANT = 16.50142
DECODE_QUADRATIC = -25.74
DECODE_LINEAR = 54.01
DECODE_CONSTANT = 5.74
DECODE_FLOOR_MS = 1.0  # token-emitting passes never collapse onto one timestamp


def prefill_ms(batch_size: float, mean_isl: float, mean_prefix: float) -> float:
    new = mean_isl - mean_prefix
    if batch_size == 0 or new == 0:
        return 0.0
    tokens = batch_size * new
    return PREFILL_QUADRATIC * tokens * tokens + PREFILL_LINEAR * tokens + PREFILL_CONSTANT


def decode_ms(active_kv_tokens: float, total_kv_tokens: float) -> float:
    # Conditionals, not min()/max(): a decode stretch calls this once per pass.
    u = active_kv_tokens / total_kv_tokens if total_kv_tokens > 0 else 1.0
    if u > 1.0:
        u = 1.0
    ms = DECODE_QUADRATIC * u * u + DECODE_LINEAR * u + DECODE_CONSTANT
    return ms if ms > DECODE_FLOOR_MS else DECODE_FLOOR_MS


class PolynomialPerfModel(ScalarPassTimes):
    """Prefill quadratic in new tokens, decode quadratic in KV utilisation (Dynamo's default)."""

    name = "polynomial"

    def __init__(self, *, speedup_ratio: float = 1.0) -> None:
        self.speedup_ratio = speedup_ratio

    def _parts(
        self, p: float, r: float, ctx: float, d: float, active: float, capacity: float
    ) -> tuple[float, float]:
        # The reference passes means (chunk end, cached prefix), in whole tokens (integer
        # division), and multiplies back by the batch.
        prefill = prefill_ms(r, (ctx + p) // r, ctx // r) if r else 0.0
        decode = decode_ms(active, capacity) if d else 0.0
        if self.speedup_ratio > 0:
            return prefill / self.speedup_ratio, decode / self.speedup_ratio
        return prefill, decode

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
        prefill, decode = self._parts(
            prefill_tokens,
            prefill_requests,
            prefill_context_tokens,
            decode_requests,
            active_kv_tokens,
            kv_capacity_tokens,
        )
        return prefill + decode

    def decode_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[float], float]:
        speedup = self.speedup_ratio
        if speedup > 0:
            return lambda ctx: decode_ms(ctx, kv_capacity_tokens) / speedup
        return lambda ctx: decode_ms(ctx, kv_capacity_tokens)

    def decode_run_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[np.ndarray], np.ndarray]:
        decode_only = self._decode_only
        return lambda contexts: decode_only(contexts, kv_capacity_tokens)

    def explain(self, batch: BatchShape) -> PassBreakdown:
        prefill, decode = self._parts(
            batch.prefill_tokens,
            batch.prefill_requests,
            batch.prefill_context_tokens,
            batch.decode_requests,
            batch.active_kv_tokens,
            batch.kv_capacity_tokens,
        )
        return PassBreakdown(
            unattributed_ms=prefill + decode, extra={"prefill_ms": prefill, "decode_ms": decode}
        )

    def decode_times_ms(
        self,
        decode_requests: float,
        tokens_per_step: float,
        kv_capacity_tokens: float,
        context_tokens: np.ndarray,
    ) -> np.ndarray:
        return self._decode_only(context_tokens, kv_capacity_tokens)

    def pass_times_ms(self, batches: BatchArrays) -> np.ndarray:
        if not batches.has_prefill and batches.active_kv_tokens is not None:
            d = np.asarray(batches.decode_requests)
            total = self._decode_only(batches.active_kv_tokens, batches.kv_capacity_tokens)
            return total if np.minimum.reduce(d, initial=1) > 0 else np.where(d > 0, total, 0.0)
        p, r, _, ctx, d, _, active = batches.filled()
        if batches.has_prefill:
            safe_r = np.where(r > 0, r, 1.0)
            tokens = r * ((ctx + p) // safe_r - ctx // safe_r)
            prefill: np.ndarray | float = np.where(
                (r > 0) & (tokens != 0),
                PREFILL_QUADRATIC * tokens**2 + PREFILL_LINEAR * tokens + PREFILL_CONSTANT,
                0.0,
            )
        else:
            prefill = 0.0
        capacity = batches.kv_capacity_tokens
        u = np.minimum(active / capacity, 1.0) if capacity > 0 else np.ones_like(active)
        decode = np.where(
            d > 0,
            np.maximum(DECODE_FLOOR_MS, DECODE_QUADRATIC * u * u + DECODE_LINEAR * u + DECODE_CONSTANT),
            0.0,
        )
        total = prefill + decode
        return total / self.speedup_ratio if self.speedup_ratio > 0 else total

    def _decode_only(self, active_kv_tokens: np.ndarray, capacity: float) -> np.ndarray:
        """Passes that each decode at least one sequence."""
        # In place and through the ufuncs themselves: per-call overhead, not arithmetic, is the
        # cost of short runs. The scalar's operations in its order, Q * u * u + L * u + C, so
        # that a planned run priced here equals one priced pass by pass to the bit.
        active = np.asarray(active_kv_tokens, dtype=np.float64)
        if capacity > 0:
            u = active / capacity
            np.minimum(u, 1.0, out=u)
        else:
            u = np.ones_like(active)
        total = u * DECODE_QUADRATIC
        total *= u
        total += u * DECODE_LINEAR
        total += DECODE_CONSTANT
        np.maximum(total, DECODE_FLOOR_MS, out=total)
        if self.speedup_ratio > 0:
            total /= self.speedup_ratio
        return total

    def describe(self) -> dict[str, object]:
        return {"provider": self.name, "speedup_ratio": self.speedup_ratio}
