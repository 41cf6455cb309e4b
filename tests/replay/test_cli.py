import json
import subprocess
import sys
from pathlib import Path

import pytest

from aisimulate.replay.cli import main
from aisimulate.replay.config import load_replay_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "aisimulate" / "replay"


@pytest.mark.parametrize(
    "name", ["synthetic_closed_loop.yaml", "trace_open_loop.yaml", "disagg_closed_loop.yaml"]
)
def test_examples_run_and_write_results(tmp_path, capsys, name):
    out, csv_path, timeline = tmp_path / "o.json", tmp_path / "r.csv", tmp_path / "t.csv"
    code = main(
        [
            "--config",
            str(EXAMPLES / name),
            "--json",
            str(out),
            "--requests-csv",
            str(csv_path),
            "--timeline-csv",
            str(timeline),
        ]
    )
    assert code == 0
    assert "TTFT" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert set(data) >= {"summary", "perf_model", "config", "requests", "timeline"}
    assert data["summary"]["completed_requests"] > 0 and data["perf_model"] == "analytic"
    assert len(csv_path.read_text().splitlines()) == data["summary"]["num_requests"] + 1
    assert timeline.read_text().startswith("time_ms,")


def test_planner_example_reports_the_fleet(tmp_path, capsys):
    fleet = tmp_path / "fleet.csv"
    assert main(["--config", str(EXAMPLES / "planner_open_loop.yaml"), "--replicas-csv", str(fleet)]) == 0
    assert "planner ticks" in capsys.readouterr().out
    lines = fleet.read_text().splitlines()
    assert lines[0] == "time_ms,role,active,starting,draining"
    assert lines[1] == "0.0,agg,4,0,0" and len(lines) > 2


def write(tmp_path, text):
    path = tmp_path / "replay.yaml"
    path.write_text(text)
    return path


GOOD = """\
deployment:
  model: meta-llama/Llama-3.1-8B
  system: h200_sxm
  agg: {tp: 1, replicas: 2}
workload: {isl: 256, osl: 16, concurrency: 4, num_requests: 8}
perf: polynomial
"""


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD.replace("tp: 1", "tpp: 1"), "deployment.agg.tpp: unknown key [{p}:4]"),
        (
            GOOD.replace("tp: 1", "tp: 0"),
            "deployment.agg.tp: Input should be greater than or equal to 1 [{p}:4]",
        ),
        (GOOD.replace("replicas: 2", "replicas: -2"), "deployment.agg.replicas"),
        (GOOD.replace("concurrency: 4", "concurrency: 4, bogus: 1"), "workload.bogus: unknown key [{p}:5]"),
        (GOOD.replace("isl: 256", "isl: -1"), "workload.isl"),
        (GOOD.replace("h200_sxm", "h201"), "unknown system 'h201'; did you mean"),
        (GOOD.replace("h200_sxm", "h201"), "[deployment.system, {p}:"),
        (GOOD.replace("meta-llama/Llama-3.1-8B", "llama-9"), "unknown model 'llama-9'"),
        (GOOD.replace("meta-llama/Llama-3.1-8B", "llama-9"), "[deployment.model, {p}:"),
        (GOOD.replace("perf: polynomial", "perf: magic"), "perf must be one of"),
        (GOOD + "sla: {}\n", "sla: an SLA needs"),
        (GOOD.replace("agg: {tp: 1, replicas: 2}", "agg: {tp: 3}"), "num_heads % tp"),
        ("deployment: [1\n", "invalid YAML"),
        (
            GOOD.replace("agg: {tp: 1, replicas: 2}", "backend: sglang\n  agg: {async_scheduling: true}"),
            "agg.async_scheduling is vLLM's switch",
        ),
        (
            GOOD.replace("agg: {tp: 1, replicas: 2}", "router: {mode: random, overlap_score_credit: 0.5}"),
            "deployment.router.overlap_score_credit: applies to mode kv_router only, not random [{p}:4]",
        ),
        (
            GOOD.replace("agg: {tp: 1, replicas: 2}", "router:\n    mode: kv_router\n    overlap_credit: 1"),
            "deployment.router.overlap_credit: not a setting of mode kv_router [{p}:6]",
        ),
        (
            GOOD.replace("agg: {tp: 1, replicas: 2}", "router:\n    mode: kv_routr"),
            "deployment.router.mode: Input should be one of 'round_robin', 'random', 'least_loaded', "
            "'kv_router' [{p}:5]",
        ),
        (
            GOOD.replace("agg: {tp: 1, replicas: 2}", "router: {mode: kv_router, overlap_score_credit: 2}"),
            "deployment.router.overlap_score_credit: Input should be less than or equal to 1 [{p}:4]",
        ),
        (
            GOOD.replace("agg: {tp: 1, replicas: 2}", "frontend_latency_ms: -3"),
            "deployment.frontend_latency_ms: Input should be greater than or equal to 0 [{p}:4]",
        ),
        (
            GOOD.replace(
                "workload: {isl: 256, osl: 16, concurrency: 4, num_requests: 8}",
                "workload: {trace_path: missing.jsonl}",
            ),
            "cannot open trace",
        ),
    ],
)
def test_bad_configs_fail_in_one_line_with_exit_2(tmp_path, capsys, text, needle):
    path = write(tmp_path, text)
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle.format(p=path) in err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")


def test_config_paths_resolve_against_the_yaml_folder(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "output_length": 2, "hash_ids": [1]}\n')
    config = load_replay_config(
        write(
            tmp_path,
            GOOD.replace(
                "workload: {isl: 256, osl: 16, concurrency: 4, num_requests: 8}",
                "workload: {trace_path: t.jsonl}",
            )
            + "perf_table: table.csv\n",
        )
    )
    assert config.workload.trace_path == tmp_path / "t.jsonl"
    assert config.perf_table == tmp_path / "table.csv"


def test_module_entry_point(tmp_path):
    path = write(tmp_path, GOOD)
    proc = subprocess.run(
        [sys.executable, "-m", "aisimulate.replay", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and "completed" in proc.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "aisimulate.replay", "--config", str(tmp_path / "no.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
