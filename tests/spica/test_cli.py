"""``python -m aisimulate.spica``: the experimental marking, exit codes, messages and files."""

import csv
import importlib
import json
import subprocess
import sys

import pytest
import yaml

from aisimulate.errors import InfeasibleError
from aisimulate.spica import cli
from aisimulate.spica.cli import build_parser, main
from aisimulate.spica.experimental import NOTICE

TINY = {
    "search_space": {
        "model_name": "meta-llama/Llama-3.1-8B",
        "hardware_sku": "h200_sxm",
        "gpu_budget": 2,
        "context_length": 4096,
        "deployment_mode": ["agg"],
        "router_mode": ["round_robin"],
        "planner_scaling_policy": ["disabled"],
        "agg_max_num_seqs": [8, 16],
    },
    "workload": {"isl": 512, "osl": 32, "concurrency": 4, "num_request_ratio": 2},
    "goal": {"target": "throughput_per_gpu"},
    "sweep": {"max_rounds": 2, "candidates_per_round": 2, "parallel_evals": 1},
}


def write(tmp_path, data, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run(tmp_path, data, *flags):
    return main(["--config", write(tmp_path, data), "--output-dir", str(tmp_path / "out"), *flags])


def test_help_is_marked_experimental():
    assert build_parser().description.startswith("[EXPERIMENTAL]")
    shown = subprocess.run(
        [sys.executable, "-m", "aisimulate.spica", "--help"], capture_output=True, text=True, check=True
    )
    assert "[EXPERIMENTAL]" in shown.stdout


def test_a_search_writes_its_files_and_prints_the_table(tmp_path, capsys):
    assert run(tmp_path, TINY) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == NOTICE and captured.err.count("EXPERIMENTAL") == 1
    assert "best of" in captured.out and "agg vllm" in captured.out
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"goal", "best", "tallies", "best_value_by_round", "load_predictor", "config"}
    assert results["load_predictor"]["reason"] == "no_throughput_scaling_candidate"
    assert results["best"][0]["sample"]["deployment_mode"] == "agg" and results["best"][0]["summary"]
    journal = (out / "trials.jsonl").read_text().splitlines()
    assert sum(results["tallies"].values()) == len(journal)
    with (out / "results.csv").open() as rows:
        table = list(csv.DictReader(rows))
    assert len(table) == len(journal) and {"trial_number", "status", "throughput_per_gpu", "tp"} <= set(
        table[0]
    )
    deploy = sorted((out / "deploy").iterdir())
    assert deploy and (deploy[0] / "launch.sh").read_text().count("vllm serve") >= 1
    assert yaml.safe_load((deploy[0] / "dynamo_graph_deployment.yaml").read_text())["kind"] == (
        "DynamoGraphDeployment"
    )
    assert (out / "study.db").is_file()


def test_json_prints_results_and_a_pareto_search_plots(tmp_path, capsys):
    pareto = json.loads(json.dumps(TINY))
    pareto["goal"] = {"target": "pareto"}
    pareto["workload"] = {"isl": 512, "osl": 32, "kv_load_ratio": [0.01, 0.05], "num_request_ratio": 1}
    reference = tmp_path / "measured.csv"
    reference.write_text("tok_s_per_user,tok_s_per_gpu\n50,1000\n100,500\n")
    assert run(tmp_path, pareto, "--json", "--reference-csv", str(reference)) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["hypervolume_by_round"][-1] > 0 and printed["best"]
    assert (tmp_path / "out" / "pareto.png").stat().st_size > 0


def test_no_feasible_candidate_exits_1(tmp_path, capsys, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise InfeasibleError("weights do not fit", where="deployment.agg")

    # One evaluation at a time runs in this process: every candidate runs out of KV memory.
    monkeypatch.setattr(importlib.import_module("aisimulate.spica.evaluate"), "simulate", out_of_memory)
    assert run(tmp_path, TINY, "--quiet") == 1
    text = (tmp_path / "out" / "results.json").read_text()
    assert "NaN" not in text and json.loads(text)["best_value_by_round"][0] is None  # strict JSON
    err = capsys.readouterr().err
    assert (
        err.splitlines()[-1]
        == "error: no feasible candidate found (check backends / SLA / gpu_budget / replay errors)"
    )


def test_bad_config_or_flags_exit_2_with_one_line(tmp_path, capsys):
    bad = json.loads(json.dumps(TINY))
    bad["sweep"]["max_rounds"] = 0
    assert run(tmp_path, bad) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sweep.max_rounds") and "sweep.yaml:" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exited:
        run(tmp_path, TINY, "--parallel-evals", "0")
    assert exited.value.code == 2
    assert run(tmp_path, TINY, "--quiet") == 0
    capsys.readouterr()
    assert run(tmp_path, TINY, "--quiet") == 2  # the folder holds a search: --resume or another folder
    assert "pass --resume" in capsys.readouterr().err


def test_interrupted_search_exits_130_keeps_results_and_resumes(tmp_path, monkeypatch, capsys):
    real = cli.run_smart_search

    def interrupted(config, **kwargs):
        seen = []

        def on_trial(record):
            seen.append(record)
            if len(seen) == 2:
                raise KeyboardInterrupt

        return real(config, **{**kwargs, "on_trial": on_trial})

    monkeypatch.setattr(cli, "run_smart_search", interrupted)
    assert run(tmp_path, TINY, "--quiet") == 130
    assert "continue with --resume" in capsys.readouterr().err
    kept = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sum(kept["tallies"].values()) == 2
    monkeypatch.setattr(cli, "run_smart_search", real)
    assert run(tmp_path, TINY, "--quiet", "--resume") == 0
    done = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sum(done["tallies"].values()) > 2
