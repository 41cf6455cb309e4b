"""Every latency provider answers the same questions the same way (the PerfModel seam)."""

import numpy as np
import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf import (
    AnalyticPerfModel,
    BatchArrays,
    BatchShape,
    ParallelShape,
    PerfModel,
    PolynomialPerfModel,
    TablePerfModel,
)

BATCHES = [
    BatchShape(
        decode_requests=1, decode_context_tokens=1000, active_kv_tokens=1000, kv_capacity_tokens=100_000
    ),
    BatchShape(
        decode_requests=64,
        decode_context_tokens=64 * 2048,
        active_kv_tokens=131_072,
        kv_capacity_tokens=500_000,
    ),
    BatchShape(prefill_tokens=4096, prefill_requests=1, active_kv_tokens=4096, kv_capacity_tokens=500_000),
    BatchShape(
        prefill_tokens=2048,
        prefill_requests=2,
        prefill_context_tokens=1024,
        decode_requests=32,
        decode_context_tokens=32 * 512,
        active_kv_tokens=40_000,
        kv_capacity_tokens=500_000,
    ),
]


def _table() -> TablePerfModel:
    return TablePerfModel(
        np.array([128.0, 1024.0, 8192.0]),
        np.array([10.0, 40.0, 300.0]),
        np.array([0.0, 100_000.0, 1_000_000.0]),
        np.array([128.0, 4096.0]),
        np.array([[5.0, 6.0], [8.0, 12.0], [30.0, 45.0]]),
    )


class PerfModelContract:
    """Subclasses provide ``make()``; every provider must pass these."""

    def make(self) -> PerfModel:
        raise NotImplementedError

    def test_is_a_perf_model(self):
        assert isinstance(self.make(), PerfModel)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_explain_adds_up_to_the_pass_time(self, batch):
        model = self.make()
        assert model.explain(batch).total_ms == pytest.approx(model.pass_time_ms(batch), rel=1e-12)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_positive_for_real_work(self, batch):
        assert self.make().pass_time_ms(batch) > 0

    def test_empty_pass_costs_nothing(self):
        assert self.make().pass_time_ms(BatchShape()) == 0

    def test_vectorised_equals_scalar(self):
        model = self.make()
        arrays = BatchArrays(
            prefill_tokens=np.array([b.prefill_tokens for b in BATCHES]),
            prefill_requests=np.array([b.prefill_requests for b in BATCHES]),
            prefill_context_tokens=np.array([b.prefill_context_tokens for b in BATCHES]),
            decode_requests=np.array([b.decode_requests for b in BATCHES]),
            decode_context_tokens=np.array([b.decode_context_tokens for b in BATCHES]),
            active_kv_tokens=np.array([b.active_kv_tokens for b in BATCHES]),
            kv_capacity_tokens=500_000,
        )
        # The first batch has another capacity; compare against the same capacity.
        expected = [
            model.pass_time_ms(
                BatchShape(**{**_fields(b), "kv_capacity_tokens": 500_000, "prefill_attention_pairs": None})
            )
            for b in BATCHES
        ]
        np.testing.assert_allclose(model.pass_times_ms(arrays), expected, rtol=1e-9)

    @pytest.mark.parametrize(("decoders", "tokens_per_step"), [(1, 1.0), (64, 1.0), (48, 3.0)])
    def test_decode_pricer_is_time_ms(self, decoders, tokens_per_step):
        """A stretch's pass prices are exactly the scalar path's, context by context."""
        model = self.make()
        price = model.decode_pricer(decoders, tokens_per_step, 500_000)
        for ctx in (decoders * 100, decoders * 2048 + 7, 450_000, 600_000):
            assert price(ctx) == model.time_ms(0, 0, 0.0, 0, decoders, ctx, tokens_per_step, ctx, 500_000)

    @pytest.mark.parametrize(("decoders", "tokens_per_step"), [(1, 1.0), (64, 1.0), (48, 3.0)])
    def test_decode_times_are_the_vectorised_passes(self, decoders, tokens_per_step):
        """A long stretch's prices in one call: the passes spelled out to the last bit, and the
        scalar path's to rounding."""
        model = self.make()
        ctx = np.array([decoders * 100, decoders * 2048 + 7, 450_000, 600_000], dtype=np.float64)
        times = model.decode_times_ms(decoders, tokens_per_step, 500_000, ctx)
        spelled = BatchArrays(
            decode_requests=np.full(ctx.size, float(decoders)),
            decode_context_tokens=ctx,
            tokens_per_step=tokens_per_step,
            active_kv_tokens=ctx,
            kv_capacity_tokens=500_000,
        )
        assert np.array_equal(times, model.pass_times_ms(spelled))
        scalar = [model.time_ms(0, 0, 0.0, 0, decoders, c, tokens_per_step, c, 500_000) for c in ctx]
        np.testing.assert_allclose(times, scalar, rtol=1e-12)


def _fields(batch: BatchShape) -> dict:
    return {name: getattr(batch, name) for name in batch.__slots__}


class TestAnalytic(PerfModelContract):
    def make(self):
        return AnalyticPerfModel(get_model("Qwen/Qwen3-30B-A3B"), get_system("h200_sxm"), ParallelShape(tp=2))


class TestAnalyticDense(PerfModelContract):
    def make(self):
        return AnalyticPerfModel(
            get_model("meta-llama/Llama-3.1-70B"), get_system("h100_sxm"), ParallelShape(tp=4, pp=2)
        )


class TestAnalyticAsync(PerfModelContract):
    def make(self):
        model, system = get_model("meta-llama/Llama-3.1-8B"), get_system("h100_sxm")
        return AnalyticPerfModel(model, system, ParallelShape(), async_scheduling=True)


class TestAnalyticMtp(PerfModelContract):
    def make(self):
        model, system = get_model("Qwen/Qwen3-30B-A3B"), get_system("h200_sxm")
        return AnalyticPerfModel(model, system, ParallelShape(), nextn=2)


class TestAnalyticSparseAttention(PerfModelContract):
    def make(self):
        model, system = get_model("zai-org/GLM-5-FP8"), get_system("b200_sxm")
        return AnalyticPerfModel(model, system, ParallelShape(tp=8), backend="sglang")


class TestAnalyticHybridLinearAsync(PerfModelContract):
    def make(self):
        model, system = get_model("Qwen/Qwen3.5-397B-A17B"), get_system("b200_sxm")
        return AnalyticPerfModel(model, system, ParallelShape(tp=8), async_scheduling=True)


class TestPolynomial(PerfModelContract):
    def make(self):
        return PolynomialPerfModel()


class TestPolynomialSpeedup(PerfModelContract):
    def make(self):
        return PolynomialPerfModel(speedup_ratio=2.5)


class TestTable(PerfModelContract):
    def make(self):
        return _table()
