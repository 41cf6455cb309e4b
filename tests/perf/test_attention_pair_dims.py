"""Prefill attention of narrow heads: a (query, key) pair costs at least ``min_pair_dims`` of work."""

import json
from dataclasses import replace
from importlib import resources

import pytest

from aisimulate.perf.kernels import AttentionFit, context_attention
from aisimulate.perf.points import Point, calibrated_fit, predict
from tests.scripts import load_script

FIT = AttentionFit(compute_eff=0.5, kv_half=0.0, t0_ms=0.0, per_request_ms=0.0)


def _pair_ms(head_dim: int, fit: AttentionFit) -> float:
    cost = context_attention(
        num_layers=1,
        num_heads=64,
        qk_dim=head_dim,
        v_dim=head_dim,
        kv_bytes_per_token_layer=2048,
        peak_tflops=2250,
        hbm_gbps=8000,
        fit=fit,
        num_sliding_layers=1,
        sliding_window=128,
    )
    return cost.per_pair_ms


def test_narrow_heads_cost_the_pairs_least_work():
    floored = replace(FIT, min_pair_dims=200.0)
    assert _pair_ms(64, floored) == pytest.approx(_pair_ms(64, FIT) * 200 / 128)
    # A 128-dim head's two matmuls (256 dims) outweigh the floor: its price does not move.
    assert _pair_ms(128, floored) == _pair_ms(128, FIT)


def test_sliding_window_layers_pay_the_same_least_work():
    floored = replace(FIT, min_pair_dims=200.0)
    kwargs = dict(
        num_layers=1,
        num_heads=64,
        qk_dim=64,
        v_dim=64,
        kv_bytes_per_token_layer=2048,
        peak_tflops=2250,
        hbm_gbps=8000,
        num_sliding_layers=1,
        sliding_window=128,
    )
    plain, narrow = context_attention(fit=FIT, **kwargs), context_attention(fit=floored, **kwargs)
    assert narrow.sliding_per_pair_ms == pytest.approx(plain.sliding_per_pair_ms * 200 / 128)


def _gb200_point(head_dim: int, heads: int, kv_heads: int, isl: int, measured_ms: float) -> Point:
    row = {"batch": "1", "isl": str(isl), "num_heads": str(heads), "num_kv_heads": str(kv_heads)}
    row["head_dim"] = str(head_dim)
    return Point("context_attention", "gb200", "trtllm", "bf16", measured_ms, row)


def test_shipped_fit_prices_gpt_oss_prefill_attention_as_measured():
    # AIConfigurator 0.12, gb200 TRT-LLM 1.3.0rc20 context_attention_perf: one full-attention
    # layer of gpt-oss-120b on one GPU (64 heads, 8 KV heads of 64 dims, bf16), one 8,192-token
    # prompt: 0.821 ms. Priced by FLOPs alone it was 0.529 ms (35% fast).
    point = _gb200_point(64, 64, 8, 8192, 0.821051)
    fit = calibrated_fit(point)
    assert fit.min_pair_dims > 128
    assert predict(point, fit) == pytest.approx(point.measured_ms, rel=0.10)
    assert predict(point, replace(fit, min_pair_dims=0.0)) < 0.7 * point.measured_ms


def test_shipped_fit_leaves_128_dim_heads_alone():
    point = _gb200_point(128, 64, 8, 8192, 1.0)
    fit = calibrated_fit(point)
    assert predict(point, fit) == predict(point, replace(fit, min_pair_dims=0.0))


def test_calibrate_perf_refits_the_shipped_pair_dims_alone():
    script = load_script("benchmarks/calibrate_perf.py")
    shipped = json.loads((resources.files("aisimulate.perf") / "data" / "calibration.json").read_text())
    fits = json.loads(json.dumps(shipped["fits"]))
    for entry in fits.values():
        if "context_attention" in entry:
            entry["context_attention"]["min_pair_dims"] = 0.0
    script.fit_pair_dims(script.DEFAULT_DATA, fits)
    refitted = 0
    for key, entry in shipped["fits"].items():
        if "context_attention" not in entry:
            continue
        before, after = entry["context_attention"], fits[key]["context_attention"]
        assert after["min_pair_dims"] == pytest.approx(before["min_pair_dims"], rel=0.01), key
        assert {k: v for k, v in after.items() if k != "min_pair_dims"} == {
            k: v for k, v in before.items() if k != "min_pair_dims"
        }
        refitted += 1
    assert refitted == 6  # h100, h200, b200 x TRT-LLM, vLLM
