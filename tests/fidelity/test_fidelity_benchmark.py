"""The measured-data benchmark script, run in-process on a tiny bundled file."""

import csv
import json
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SMALL = Path(__file__).parent / "data" / "measured_small.csv"


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/fidelity_measured.py")


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


SILICON = Path(__file__).parent / "data" / "silicon_small.csv"


def test_aiconfigurator_rows_agg_and_disagg_come_out_per_split_with_coverage(bench, tmp_path, capsys):
    out = tmp_path / "rows.csv"
    assert bench.main(["--csv", str(SILICON), "--out", str(out), "--quiet"]) == 0
    rows = {r["id"]: r for r in csv.DictReader(out.open())}
    assert len(rows) == 7
    disagg = rows["dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486"]
    assert (disagg["status"], disagg["mode"], disagg["split"]) == ("ok", "disagg", "development")
    assert rows["dsr1_gb300_trtllm_fp8_disagg_1024x1024_c4_cfg392"]["split"] == "validation"
    filled = rows["2026_03_25_gpt_oss_120b_gb200_trtllm_fp4_disagg_8192x1024_c384_tp1_0_ep1_0_1263"]
    assert (filled["status"], filled["nextn"]) == ("ok", "0")
    assert filled["workers_from"] == "InferenceX gptoss-fp4-gb200-dynamo-trt@0004cf5f"
    text = capsys.readouterr().out
    assert "split development: 6/6 rows replayed" in text and "split validation: 1/1 rows replayed" in text
    summary = json.loads(text.strip().splitlines()[-1])
    assert (summary["rows"], summary["replayed"], summary["skipped"]) == (7, 7, 0)
    dev = summary["splits"]["development"]
    assert (dev["rows"], dev["replayed"], dev["coverage"]) == (6, 6, 1.0)
    assert set(dev["by_mode"]) == {"agg", "disagg"} and dev["by_mode"]["disagg"]["tpot"]["n"] == 2
    assert set(dev["by_backend"]) == {"sglang", "trtllm", "vllm"}
    assert set(dev["by_client"]) == {"inferencex", "fixed-lengths"}
    assert "median_signed_pct" in dev["all"]["ttft"]


def test_filters_pick_systems_and_models(bench, capsys):
    assert (
        bench.main(["--csv", str(SILICON), "--quiet", "--systems", "gb200", "--models", "Qwen/Qwen3-32B"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["rows"], summary["replayed"]) == (1, 1)


def test_filters_pick_modes_and_backends(bench, capsys):
    assert bench.main(["--csv", str(SILICON), "--quiet", "--modes", "disagg", "--backends", "trtllm"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["rows"] == 2  # the file's two TRT-LLM disaggregated rows (gb200, gb300)


def test_no_row_stops_the_run_whatever_its_replay_raises(bench, monkeypatch, capsys):
    real = bench.predict

    def flaky(case, *, perf):
        if case.row.system == "gb200":
            raise RuntimeError("no data for this MoE shape\nsecond line")
        return real(case, perf=perf)

    monkeypatch.setattr(bench, "predict", flaky)
    assert bench.main(["--csv", str(SILICON), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "RuntimeError: no data for this MoE shape" in text and "second line" not in text
    summary = json.loads(text.strip().splitlines()[-1])
    assert (summary["replayed"], summary["skipped"]) == (4, 3)


def test_acceptance_systems_are_held_back_unless_named(bench, tmp_path, capsys):
    # A development row relabelled: the guard works on the system name alone.
    lines = SILICON.read_text().splitlines()
    relabelled = lines[1].replace(",h100_sxm,", ",h200_sxm,")
    path = tmp_path / "with_acceptance.csv"
    path.write_text("\n".join([lines[0], lines[1], relabelled]) + "\n")
    assert bench.main(["--csv", str(path), "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["rows"], summary["held_back_acceptance"]) == (1, 1)
    assert bench.main(["--csv", str(path), "--quiet", "--systems", "h200_sxm"]) == 2
    assert "h200_sxm is in the acceptance set" in capsys.readouterr().err
    assert bench.main(["--csv", str(path), "--quiet", "--acceptance", "h200_sxm"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["rows"], summary["held_back_acceptance"]) == (2, 0)
    assert summary["splits"]["acceptance"]["rows"] == 1
    assert bench.main(["--csv", str(path), "--acceptance", "h100_sxm"]) == 2


def test_a_concurrency_bound_keeps_the_smaller_runs(bench, tmp_path, capsys):
    lines = SILICON.read_text().splitlines()
    # A row no InferenceX entry matches (385 users): unreadable, skipped with its reason.
    unreadable = next(line for line in lines if "_c384_" in line).replace(
        "concurrency=384", "concurrency=385"
    )
    path = tmp_path / "with_unreadable.csv"
    path.write_text("\n".join([*lines, unreadable]) + "\n")
    assert bench.main(["--csv", str(path), "--quiet", "--max-concurrency", "8"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # c8, c8, c4, c4 and the unreadable row (skipped with its reason); not c16, c384 or c512.
    assert (summary["rows"], summary["replayed"]) == (5, 4)
