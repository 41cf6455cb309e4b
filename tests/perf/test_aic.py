"""The AIConfigurator backend: its answers, their memo, and how providers are chosen around it.

The extra is installed in CI (``.[aic]``), so these run there; one small model keeps them quick.
"""

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from aisimulate.catalog import get_model, get_system, publisher_config
from aisimulate.errors import ConfigError
from aisimulate.perf import BatchArrays, BatchShape, ParallelShape, estimate_memory, get_perf_model
from aisimulate.perf.aic import AicModel, AicPerfModel, bucket_tokens, bucket_tokens_array, resolve_aic_model
from tests.perf.test_contract import PerfModelContract

LLAMA_8B = "meta-llama/Llama-3.1-8B"


@functools.cache
def _llama() -> AicPerfModel:
    return AicPerfModel(get_model(LLAMA_8B), get_system("h200_sxm"), ParallelShape(tp=1))


class TestAicContract(PerfModelContract):
    def make(self):
        return _llama()


def test_model_resolves_to_the_bundled_aic_config_under_an_alias():
    assert resolve_aic_model(get_model(LLAMA_8B)) == AicModel(path="meta-llama/Meta-Llama-3.1-8B")


def test_a_variant_aic_lacks_resolves_to_its_base_with_the_weight_format():
    assert resolve_aic_model(get_model("nvidia/Qwen3-32B-FP8")) == AicModel(
        path="Qwen/Qwen3-32B", gemm_quant="fp8"
    )
    assert resolve_aic_model(get_model("Qwen/Qwen3-30B-A3B-FP8")) == AicModel(path="Qwen/Qwen3-30B-A3B-FP8")


def test_a_model_aic_lacks_resolves_to_our_config_folder():
    resolved = resolve_aic_model(get_model("meta-llama/Llama-3.3-70B"))
    assert resolved is not None and (Path(resolved.path) / "config.json").is_file()


def _local_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(publisher_config(LLAMA_8B).config))
    return get_model(str(tmp_path))


def test_agrees_with_aics_own_static_estimate():
    model = _llama()
    engine = model._engine
    context_ms, generation_ms, _ = engine.run_static(batch_size=4, isl=1024, osl=2)
    prefill = BatchShape(prefill_tokens=4 * 1024, prefill_requests=4)
    decode = BatchShape(decode_requests=4, decode_context_tokens=4 * 1024)
    assert model.pass_time_ms(prefill) == pytest.approx(context_ms, rel=1e-9)
    assert model.pass_time_ms(decode) == pytest.approx(generation_ms, rel=1e-9)


def test_mixed_pass_matches_aics_mixed_step_when_contexts_agree():
    model = _llama()
    mixed = BatchShape.from_chunks([(1024, 0)], [1024] * 8)
    assert model.pass_time_ms(mixed) == pytest.approx(
        model._engine.mixed_step_latency(1024, 8, 1024, 2, 0), rel=1e-9
    )


def test_latency_is_sane_and_monotone():
    model = _llama()
    decode = [model.time_ms(0, 0, 0, 0, b, b * 2048) for b in (1, 8, 64, 256)]
    assert 1 < decode[0] < 50 and decode == sorted(decode) and decode[-1] > decode[0]
    contexts = [model.time_ms(0, 0, 0, 0, 32, 32 * c) for c in range(100, 20_000, 97)]
    assert np.all(np.diff(contexts) >= 0) and contexts[-1] > contexts[0]
    # AIConfigurator's prefill data has a 3 % dip near 3.3k tokens; allow 5 % below the running max.
    prefill = np.array([model.time_ms(n, 1, 0, 0, 0, 0) for n in range(16, 8192, 61)])
    assert np.all(prefill >= 0.95 * np.maximum.accumulate(prefill)) and prefill[-1] > 5 * prefill[0]
    assert 10 < model.time_ms(1024, 1, 0, 0, 0, 0) < 100
    cached = [model.time_ms(512, 1, 0, c, 0, 0) for c in (0, 1024, 4096, 16384)]
    assert cached == sorted(cached)
    assert model.time_ms(1024, 1, 0, 0, 8, 8 * 1024) > model.time_ms(1024, 1, 0, 0, 0, 0)


def test_calls_are_memoised_on_buckets():
    model = AicPerfModel(get_model(LLAMA_8B), get_system("h200_sxm"), ParallelShape(tp=1))
    for context in range(4000, 4100):
        model.time_ms(0, 0, 0, 0, 16, 16 * context)
    assert len(model._decode) <= 2


def test_bucketing_is_exact_when_short_monotone_and_idempotent():
    tokens = np.arange(0, 70_000)
    buckets = bucket_tokens_array(tokens)
    assert list(buckets[:65]) == list(range(65))
    assert np.all(np.diff(buckets) >= 0)
    assert np.all(np.abs(buckets - tokens) <= tokens / 32 + 1)
    np.testing.assert_array_equal(bucket_tokens_array(buckets), buckets)
    assert [bucket_tokens(t) for t in (65, 1000, 69_999)] == list(buckets[[65, 1000, 69_999]])


def test_vector_decode_matches_scalar():
    model = _llama()
    requests = np.array([1, 7, 64, 200])
    contexts = requests * np.array([300, 5000, 1234, 20_000])
    arrays = BatchArrays(decode_requests=requests, decode_context_tokens=contexts)
    expected = [model.time_ms(0, 0, 0, 0, d, c) for d, c in zip(requests, contexts, strict=True)]
    np.testing.assert_allclose(model.pass_times_ms(arrays), expected, rtol=1e-12)


def _providers(name: str, system: str = "h200_sxm"):
    return get_perf_model(name, model=get_model(LLAMA_8B), system=get_system(system), shape=ParallelShape())


def test_auto_runs_aic_when_it_covers_the_worker():
    assert _providers("auto").name == "aic"


def test_auto_falls_back_to_analytic_when_aic_lacks_the_model(tmp_path):
    local = get_perf_model(
        "auto", model=_local_model(tmp_path), system=get_system("h200_sxm"), shape=ParallelShape()
    )
    assert local.name == "analytic"


def test_aic_names_the_uncovered_model(tmp_path):
    with pytest.raises(ConfigError, match="perf: aic has no config for"):
        get_perf_model(
            "aic", model=_local_model(tmp_path), system=get_system("h200_sxm"), shape=ParallelShape()
        )


def test_missing_extra_is_one_clear_error_and_auto_falls_back(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    monkeypatch.setitem(sys.modules, "aiconfigurator_core.sdk", None)
    with pytest.raises(ConfigError, match=r'pip install "aisimulate\[aic\]"'):
        _providers("aic")
    assert _providers("auto").name == "analytic"


def test_a_variant_runs_at_its_weight_format():
    fp8 = AicPerfModel(
        get_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"), get_system("h200_sxm"), ParallelShape()
    )
    assert fp8.aic_model == AicModel(path="meta-llama/Meta-Llama-3.1-8B", gemm_quant="fp8")
    weight_bound = BatchShape(decode_requests=1, decode_context_tokens=1024)
    assert fp8.pass_time_ms(weight_bound) < 0.8 * _llama().pass_time_ms(weight_bound)


def _kv_tokens(model: AicPerfModel) -> int:
    return model.kv_tokens_per_rank(gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256)


def test_kv_capacity_agrees_with_our_memory_model():
    ours = estimate_memory(
        get_model(LLAMA_8B), get_system("h200_sxm"), ParallelShape(), gpu_memory_utilization=0.9
    )
    assert _kv_tokens(_llama()) == pytest.approx(ours.kv_tokens_per_rank, rel=0.01)


def test_kv_capacity_counts_one_pipeline_stage_under_pp():
    model, h100 = get_model("meta-llama/Llama-3.1-70B"), get_system("h100_sxm")
    tp4 = _kv_tokens(AicPerfModel(model, h100, ParallelShape(tp=4)))
    tp2_pp2 = _kv_tokens(AicPerfModel(model, h100, ParallelShape(tp=2, pp=2)))
    assert tp2_pp2 == pytest.approx(tp4, rel=0.02)


def test_vector_mixed_matches_scalar():
    model = _llama()
    prefill = np.array([0, 777, 3001, 5000, 9999])
    chunks = np.array([0, 1, 3, 2, 1])
    context = np.array([0, 0, 4100, 333, 20_000])
    requests = np.array([5, 0, 9, 31, 200])
    contexts = requests * 1500
    arrays = BatchArrays(
        prefill_tokens=prefill,
        prefill_requests=chunks,
        prefill_context_tokens=context,
        decode_requests=requests,
        decode_context_tokens=contexts,
    )
    expected = [
        model.time_ms(p, r, 0, c, d, dc)
        for p, r, c, d, dc in zip(prefill, chunks, context, requests, contexts, strict=True)
    ]
    np.testing.assert_allclose(model.pass_times_ms(arrays), expected, rtol=1e-12)


def test_aic_prices_sparse_and_hybrid_models_with_its_own_tables():
    b200, tp8 = get_system("b200_sxm"), ParallelShape(tp=8)
    glm5 = AicPerfModel(get_model("zai-org/GLM-5-FP8"), b200, tp8, backend="sglang")
    assert glm5.time_ms(0, 0, 0.0, 0, 64, 64 * 32768) > glm5.time_ms(0, 0, 0.0, 0, 64, 64 * 8192) > 0
    qwen = AicPerfModel(get_model("Qwen/Qwen3.5-397B-A17B"), b200, tp8, backend="sglang")
    assert qwen.time_ms(4096, 1, 0.0, 0, 0, 0) > 0


def test_dsa_without_aic_tables_is_one_error_and_auto_takes_analytic():
    # AIConfigurator 0.12 has no TRT-LLM DSA tables for H200.
    model, h200, tp8 = get_model("zai-org/GLM-5-FP8"), get_system("h200_sxm"), ParallelShape(tp=8)
    with pytest.raises(ConfigError, match="perf: aic does not cover"):
        AicPerfModel(model, h200, tp8, backend="trtllm")
    assert get_perf_model("auto", model=model, system=h200, shape=tp8, backend="trtllm").name == "analytic"
