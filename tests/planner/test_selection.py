"""Forecaster selection: trace windows, the loss, and the choice among candidates."""

import json
import math

import pytest

from aisimulate.errors import ConfigError
from aisimulate.planner.predictors import PRESETS
from aisimulate.planner.selection import mean_loss, select_load_predictor, trace_windows, window_loss


def write_trace(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


def test_windows_are_densified_between_the_first_and_last_busy_interval(tmp_path):
    rows = [
        {"timestamp": 12_000, "input_length": 100, "output_length": 10},
        {"timestamp": 15_000, "input_length": 300, "output_length": 30},
        {"timestamp": 47_000, "input_length": 50, "output_length": 5},
    ]
    windows = trace_windows(write_trace(tmp_path / "t.jsonl", rows), 10)
    assert windows == [(2.0, 200.0, 20.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (1.0, 50.0, 5.0)]
    assert trace_windows(write_trace(tmp_path / "empty.jsonl", []), 10) == []


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"timestamp": "x", "input_length": 1, "output_length": 1}, "timestamp must be a finite number"),
        ({"timestamp": 1, "input_length": -1, "output_length": 1}, "input_length must be a non-negative"),
        ({"timestamp": 1, "input_length": 1}, "output_length must be a non-negative"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, row, message):
    good = {"timestamp": 0, "input_length": 1, "output_length": 1}
    path = write_trace(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(ConfigError, match=rf"{message}.*bad.jsonl:2"):
        trace_windows(path, 60)


def test_the_loss_formula_on_a_tiny_case():
    assert window_loss((10, 100, 10), (10, 100, 10)) == 0
    assert window_loss((0, 0, 0), (0, 0, 0)) == 0
    lp = math.log1p
    expected = 0.4 * abs(lp(2000) - lp(1000)) + 0.4 * abs(lp(200) - lp(100))
    assert window_loss((20, 100, 10), (10, 100, 10)) == pytest.approx(expected)
    assert window_loss((5, 0, 0), (0, 0, 0)) == 0  # request count only enters through volumes
    assert window_loss((5, 10, 0), (0, 0, 0)) > 0  # predicting traffic for an empty window costs


def test_warmup_windows_are_not_scored():
    windows = [(10.0, 100.0, 10.0)] * 3
    assert mean_loss(windows, PRESETS["constant_last"], warmup=3, interval_s=60) == math.inf
    assert mean_loss(windows, PRESETS["constant_last"], warmup=1, interval_s=60) == 0


def test_a_trend_picks_kalman_and_ties_go_to_the_earlier_candidate():
    ramp = [(float(n), 1000.0, 100.0) for n in range(10, 200, 10)]
    picked = select_load_predictor(ramp, 60, ["constant_last", "kalman_reactive_raw", "kalman_default_raw"])
    assert picked.best == "kalman_default_raw" and picked.reason == "swept"
    assert picked.losses["kalman_default_raw"] < picked.losses["kalman_reactive_raw"]
    assert picked.losses["kalman_reactive_raw"] < picked.losses["constant_last"] / 100  # a trend, not a level
    flat = [(10.0, 1000.0, 100.0)] * 12
    tie = select_load_predictor(flat, 60, ["kalman_default_raw", "constant_last"])
    assert tie.best == "kalman_default_raw"  # both predict 10 exactly: the earlier one wins
    custom = select_load_predictor(ramp, 60, [{"load_predictor": "kalman", "kalman_min_points": 3}])
    assert list(custom.losses) == ["custom_0"] and custom.best == {
        "load_predictor": "kalman",
        "kalman_min_points": 3,
    }


def test_nothing_scorable_falls_back_to_constant_last():
    picked = select_load_predictor([(1.0, 1.0, 1.0)] * 2, 60, ["kalman_default_raw"])
    assert picked.best == "constant_last" and picked.reason.startswith("swept; no_winner_fallback")
    assert picked.losses == {"kalman_default_raw": math.inf}


def test_a_missing_optional_forecaster_is_skipped_with_a_warning(monkeypatch):
    import aisimulate.planner._arima as arima

    def missing():
        raise ConfigError("load_predictor arima needs pmdarima: pip install 'aisimulate[forecast]'")

    monkeypatch.setattr(arima, "_pmdarima", missing)
    picked = select_load_predictor([(5.0, 10.0, 1.0)] * 8, 60, ["arima_raw", "constant_last"])
    assert picked.best == "constant_last" and "arima_raw" not in picked.losses
    assert picked.warnings == [
        "arima_raw skipped: load_predictor arima needs pmdarima: pip install 'aisimulate[forecast]'"
    ]
