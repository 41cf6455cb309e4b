"""``python -m aisimulate.spica``: the experimental marking, exit codes, messages and files."""

import csv
import importlib
import json
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from aisimulate.catalog.models import publisher_config
from aisimulate.errors import ConfigError, InfeasibleError
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
    assert set(results) == {
        "goal",
        "best",
        "tallies",
        "branches",
        "notes",
        "best_value_by_round",
        "load_predictor",
        "config",
    }
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
    assert (tmp_path / "out" / "convergence.png").read_bytes().startswith(b"\x89PNG")  # hypervolume by round


def test_no_feasible_candidate_exits_1(tmp_path, capsys, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise InfeasibleError("weights do not fit", where="deployment.agg")

    # One evaluation at a time runs in this process: every candidate runs out of KV memory.
    monkeypatch.setattr(importlib.import_module("aisimulate.spica.evaluate"), "simulate", out_of_memory)
    assert run(tmp_path, TINY, "--quiet") == 1
    text = (tmp_path / "out" / "results.json").read_text()
    assert "NaN" not in text and json.loads(text)["best_value_by_round"][0] is None  # strict JSON
    assert not (tmp_path / "out" / "convergence.png").exists()  # nothing to plot before anything scores
    err = capsys.readouterr().err
    assert (
        err.splitlines()[-1]
        == "error: no feasible candidate found (check backends / SLA / gpu_budget / replay errors); "
        "most often infeasible: candidate KV capacity infeasible: weights do not fit [deployment.agg]"
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


def no_room_for_big_batches(monkeypatch):
    """Every candidate with 16 sequences fails in the replay (one evaluation at a time runs here)."""
    evaluate_module = importlib.import_module("aisimulate.spica.evaluate")
    real = evaluate_module.simulate

    def simulate(plan, *args, **kwargs):
        if plan.agg.max_num_seqs == 16:  # the numbers differ by layout: still one reason
            raise RuntimeError(f"no room for 16 sequences on {plan.agg.tp} GPU(s)")
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(evaluate_module, "simulate", simulate)


def test_the_report_explains_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # a wide terminal: no wrapped lines to match across
    no_room_for_big_batches(monkeypatch)
    longer = json.loads(json.dumps(TINY))
    longer["search_space"]["agg_max_num_batched_tokens"] = [8192]
    longer["search_space"]["planner_scaling_policy"] = ["disabled", "throughput_180_5"]  # no SLA: dropped
    longer["sweep"]["max_rounds"] = 6  # 5 layouts x 2 batch sizes: the space runs out by round 6
    assert run(tmp_path, longer) == 0
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    tallies = results["tallies"]
    first = out.splitlines()[0]
    assert first.startswith(f"spica: {sum(tallies.values())} trial(s) in ")
    assert f"{tallies['feasible']} feasible" in first and f"{tallies['failed']} failed" in first
    # failures grouped (numbers aside) with their count and one example
    assert "why candidates did not score" in out
    assert re.search(
        rf"failed +│ +{tallies['failed']} +│ replay failed: RuntimeError: no room for 16 sequences "
        r"on \d GPU\(s\) \(agg trial \d+\)",
        out,
    )
    # the branch stopped early, and why; what was left out before the first ask
    assert "stopped: round" in out and "repeated earlier samples" in out
    (branch,) = results["branches"]
    assert branch["deployment_mode"] == "agg" and branch["stopped"].startswith(
        f"round {branch['rounds']} found"
    )
    assert (
        branch["asks"] == sum(tallies.values())
        and branch["new_samples"] == sum(tallies.values()) - tallies["duplicate"]
    )
    dropped = "planner_scaling_policy entries the goal cannot use (not searched): throughput_180_5"
    assert results["notes"] == [dropped] and f"note: {dropped}" in out
    # the best candidate with its knobs and launch files
    best = results["best"][0]
    launch = tmp_path / "out" / "deploy" / f"01_agg_trial{best['trial_number']}" / "launch.sh"
    assert launch.is_file() and "launch:" in out and launch.name in out
    assert f"agg_max_num_seqs={best['sample']['agg_max_num_seqs']}" in out
    # where every file is, convergence.png among them
    convergence = tmp_path / "out" / "convergence.png"
    assert convergence.read_bytes().startswith(b"\x89PNG")
    for name in ("results.json", "results.csv", "trials.jsonl", "convergence.png", "spica.log", "study.db"):
        assert name in out


def test_quiet_keeps_one_summary_line(tmp_path, capsys, monkeypatch):
    no_room_for_big_batches(monkeypatch)
    assert run(tmp_path, TINY, "--quiet") == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("spica: ")
    assert "best throughput_per_gpu" in lines[0] and lines[0].endswith(f"results in {tmp_path / 'out'}")
    assert captured.err.splitlines() == [NOTICE]


def test_a_run_where_everything_is_unsupported_says_why(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")

    def refuse(*args, **kwargs):
        raise ConfigError("no measured data for tp1 on h200_sxm", where="sweep.perf")

    monkeypatch.setattr(importlib.import_module("aisimulate.spica.evaluate"), "simulate", refuse)
    assert run(tmp_path, TINY) == 1
    captured = capsys.readouterr()
    assert "no feasible candidate; most often unsupported: no measured data for tp1" in captured.out
    assert re.search(r"unsupported +│ +\d+ +│ no measured data for tp1 on h200_sxm", captured.out)
    assert "most often unsupported: no measured data" in captured.err.splitlines()[-1]


def hide_aiconfigurator(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    monkeypatch.setitem(sys.modules, "aiconfigurator_core.sdk", None)


@pytest.mark.parametrize("flags", [(), ("--dry-run",)])
def test_a_missing_perf_extra_fails_before_the_first_evaluation(tmp_path, capsys, monkeypatch, flags):
    hide_aiconfigurator(monkeypatch)
    evaluated = []
    monkeypatch.setattr(
        importlib.import_module("aisimulate.spica.evaluate"), "simulate", lambda *a, **k: evaluated.append(a)
    )
    assert run(tmp_path, TINY, "--perf", "aic", *flags) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(
        'error: perf: aic needs the optional AIConfigurator backend: pip install "aisimulate[aic]"'
    )
    assert err.endswith("[sweep.perf]") and not evaluated
    assert not (tmp_path / "out" / "trials.jsonl").exists()


def test_a_perf_provider_without_data_for_the_model_fails_before_the_first_evaluation(tmp_path, capsys):
    local = tmp_path / "model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps(publisher_config("meta-llama/Llama-3.1-8B").config))
    data = json.loads(json.dumps(TINY))
    data["search_space"]["model_name"] = str(local)
    data["sweep"]["perf"] = "aic"
    assert run(tmp_path, data) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("error: perf: aic has no config for")
    assert "every vllm candidate would be unsupported" in err
    assert not (tmp_path / "out" / "trials.jsonl").exists()


def journal_set(path):
    """trials.jsonl as a set of records, without the wall times (of the trial and of its replay,
    the only things two runs do not share)."""
    records = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        del record["wall_s"]
        if record["summary"] is not None:
            del record["summary"]["wall_time_ms"]
        records.append(json.dumps(record, sort_keys=True))
    return set(records)


def test_kill_9_mid_search_then_resume_ends_as_an_uninterrupted_run(tmp_path):
    search = json.loads(json.dumps(TINY))
    search["sweep"].update(max_rounds=3, candidates_per_round=3)
    config = write(tmp_path, search)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(["--config", config, "--output-dir", str(whole), "--quiet"]) == 0
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aisimulate.spica",
            "--config",
            config,
            "--output-dir",
            str(killed),
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = killed / "trials.jsonl"
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if journal.is_file() and journal.read_text().count("\n") >= 2:  # the seeded point: 2 trials
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    assert process.wait(timeout=60) == -signal.SIGKILL
    assert 2 <= journal.read_text().count("\n") < len((whole / "trials.jsonl").read_text().splitlines())
    assert main(["--config", config, "--output-dir", str(killed), "--quiet", "--resume"]) == 0
    assert journal_set(journal) == journal_set(whole / "trials.jsonl")
    best = [
        [
            (b["branch"], b["trial_number"], b["sample"], b["objectives"])
            for b in json.loads((d / "results.json").read_text())["best"]
        ]
        for d in (whole, killed)
    ]
    assert best[0] == best[1] and best[0]


def test_sigterm_stops_the_search_as_ctrl_c_does_keeping_results_and_resumable(tmp_path):
    search = json.loads(json.dumps(TINY))
    # Many more rounds than the signal waits for: on a loaded machine a short search can finish
    # between the journal's second line and the signal, and then there is nothing to interrupt.
    search["sweep"].update(max_rounds=12, candidates_per_round=3, parallel_evals=2)
    config = write(tmp_path, search)
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "aisimulate.spica", "--config", config, "--output-dir", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = out / "trials.jsonl"
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if journal.is_file() and journal.read_text().count("\n") >= 2:
            process.send_signal(signal.SIGTERM)
            break
        time.sleep(0.005)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "interrupted:" in err and "continue with --resume" in err
    assert "Traceback" not in err
    assert json.loads((out / "results.json").read_text())["best"] is not None
    assert main(["--config", config, "--output-dir", str(out), "--quiet", "--resume"]) == 0
