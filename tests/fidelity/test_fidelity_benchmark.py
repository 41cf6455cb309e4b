"""The measured-data benchmark script, run in-process on a tiny bundled file."""

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = Path(__file__).parent / "data" / "measured_small.csv"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "fidelity_measured", ROOT / "benchmarks" / "fidelity_measured.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_input_row_comes_out_ok_or_skipped_with_its_reason(bench, tmp_path, capsys):
    out = tmp_path / "rows.csv"
    assert bench.main(["--csv", str(SMALL), "--out", str(out), "--quiet"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["id"] for r in rows] == [
        "llama8b_instruct_c4",
        "llama8b_nvidia_fp8_c4",
        "qwen32b_fp8_c2",
        "gptoss_fp4_c2",
        "unknown_model",
    ]
    assert [r["status"] for r in rows[:4]] == ["ok"] * 4
    assert rows[4]["status"].startswith("skipped: unknown model 'acme/NotAModel-7B'")
    for r in rows[:4]:
        predicted, measured = float(r["predicted_tpot_ms"]), float(r["measured_tpot_ms"])
        assert float(r["tpot_error_pct"]) == pytest.approx(100 * (predicted - measured) / measured, abs=0.05)
    assert rows[2]["checkpoint"] == "nvidia/Qwen3-32B-FP8"
    # What each replay ran with: the rows' release decides vLLM's scheduling (0.10: synchronous).
    assert [r["async_scheduling"] for r in rows[:4]] == ["False", "False", "False", "False"]
    assert all(float(r["frontend_latency_ms"]) >= 0 for r in rows[:4])
    text = capsys.readouterr().out
    assert "line 6 unknown_model: unknown model" in text
    summary = json.loads(text.strip().splitlines()[-1])
    assert summary["benchmark"] == "fidelity_measured"
    assert (summary["rows"], summary["replayed"], summary["skipped"]) == (5, 4, 1)
    assert summary["all"]["tpot"]["n"] == 4
    # Llama-3.1-8B and Qwen3-32B are the calibration's models; gpt-oss is held out.
    assert (summary["fitted"]["tpot"]["n"], summary["held_out"]["tpot"]["n"]) == (3, 1)
    assert list(summary["held_out_by_model"]) == ["openai/gpt-oss-120b"]


def test_a_bad_file_is_one_line_and_exit_2(bench, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "system,backend,model,isl,osl,concurrency,tp,ttft_ms,tpot_ms\nh100_sxm,vllm,m,x,1,1,1,1,1\n"
    )
    assert bench.main(["--csv", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{bad}:2: isl" in err
