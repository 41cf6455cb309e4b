"""The example tools: a sine-wave trace generator and the forecaster sweep over a trace."""

import json

from tests.scripts import load_script


def load(name):
    return load_script(f"examples/aisimulate/spica/tools/{name}.py")


def test_sine_trace_follows_the_rate_and_reads_back(tmp_path, capsys):
    out = tmp_path / "sine.jsonl"
    args = ["--out", str(out), "--duration-s", "120", "--period-s", "60", "--base", "3", "--amplitude", "2"]
    assert load("gen_sine_trace").main(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    per_second = [sum(1 for r in rows if int(r["timestamp"] // 1000) == s) for s in range(120)]
    assert per_second[0] == 3 and per_second[15] == 5 and per_second[45] == 1  # base, peak, trough
    assert len({h for r in rows for h in r["hash_ids"]}) == sum(len(r["hash_ids"]) for r in rows)
    assert "wrote" in capsys.readouterr().out


def test_sweep_prints_losses_best_first(tmp_path, capsys):
    out = tmp_path / "sine.jsonl"
    load("gen_sine_trace").main(["--out", str(out), "--duration-s", "1200", "--period-s", "600"])
    capsys.readouterr()
    code = load("run_load_predictor_sweep").main(
        ["--trace", str(out), "--interval-s", "60", "--candidates", "constant_last", "kalman_reactive_raw"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0] == "interval 60 s: 20 windows, swept"
    losses = [float(line.split()[1]) for line in lines[1:]]
    assert losses == sorted(losses) and sum("<-- best" in line for line in lines) == 1


def test_sweep_reports_a_bad_trace_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5}\n')
    assert load("run_load_predictor_sweep").main(["--trace", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: output_length") and err.endswith("bad.jsonl:1]") and "\n" not in err
