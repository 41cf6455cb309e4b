"""Load forecasters: the shared conventions, each family, presets and bad input."""

import math

import numpy as np
import pytest

from aisimulate.errors import ConfigError
from aisimulate.planner.predictors import PRESETS, PredictorSpec, make_predictor, predictor_spec


def feed(spec, values, interval_s=60.0):
    predictor = make_predictor(spec, interval_s)
    for v in values:
        predictor.add(v)
    return predictor


def test_leading_zeros_and_nan_are_skipped_and_last_value_is_echoed():
    constant = feed(PRESETS["constant_last"], [0, 0, float("nan"), 7, 0, 3])
    assert constant.predict() == 3 and constant.last() == 3
    kalman = feed(PRESETS["kalman_default_raw"], [0, 0, 0, 4, 5, 6])
    assert kalman.predict() == 6  # three points after the leading zeros: below min_points 5
    assert make_predictor(PRESETS["kalman_default_raw"]).predict() == 0.0


def test_kalman_follows_a_linear_trend_and_clips_at_zero():
    rising = feed(PRESETS["kalman_default_raw"], [10, 20, 30, 40, 50, 60, 70, 80])
    assert rising.predict() == pytest.approx(90, abs=2)
    falling = feed(PRESETS["kalman_reactive_raw"], [50, 40, 30, 20, 10, 1])
    assert falling.predict() == 0.0


def test_kalman_is_incremental():
    """Asking between points gives the same forecast as asking once at the end."""
    values = [5, 9, 4, 12, 8, 15, 11, 19]
    once = feed(PRESETS["kalman_default_raw"], values).predict()
    stepwise = make_predictor(PRESETS["kalman_default_raw"])
    for v in values:
        stepwise.add(v)
        stepwise.predict()
    assert stepwise.predict() == pytest.approx(once, rel=1e-12)


def test_log1p_models_the_log_and_maps_back():
    values = [math.expm1(x) for x in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]
    raw = feed(PRESETS["kalman_reactive_raw"], values).predict()
    logged = feed(PRESETS["kalman_reactive_log1p"], values).predict()
    assert logged == pytest.approx(math.expm1(7.0), rel=0.1)  # linear in log space: e^7 - 1
    assert raw < logged  # a linear trend on raw values underestimates exponential growth


def test_arima_fits_and_handles_constant_series():
    pytest.importorskip("pmdarima")
    constant = feed(PRESETS["arima_raw"], [4.0] * 8)
    assert constant.predict() == 4.0
    rng = np.random.default_rng(0)
    series = list(100 + 20 * np.sin(np.arange(40) / 3) + rng.normal(0, 1, 40))
    forecast = feed(PRESETS["arima_raw"], series).predict()
    assert 60 < forecast < 140
    assert feed(PRESETS["arima_log1p"], series).predict() >= 0


def test_prophet_fits_on_its_window():
    pytest.importorskip("prophet")
    forecast = feed(PRESETS["prophet_w20_raw"], [float(x) for x in range(1, 31)]).predict()
    assert forecast == pytest.approx(31, abs=1.5)


def test_fields_hold_the_familys_own_knobs_and_a_full_dump_loads_back():
    assert PRESETS["arima_log1p"].fields() == {"load_predictor": "arima", "load_predictor_log1p": True}
    reactive = PRESETS["kalman_reactive_raw"]
    assert reactive.fields()["kalman_min_points"] == 3 and "prophet_window_size" not in reactive.fields()
    assert PredictorSpec(**reactive.model_dump()) == reactive


def test_presets_and_dict_entries():
    assert len(PRESETS) == 11 and next(iter(PRESETS)) == "constant_last"
    assert PRESETS["kalman_reactive_log1p"].min_points == 3
    assert predictor_spec({"load_predictor": "prophet"}) == PredictorSpec(
        load_predictor="prophet", prophet_window_size=50
    )
    assert predictor_spec("arima_log1p").load_predictor_log1p


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("kalman_fast", "unknown load predictor preset 'kalman_fast'"),
        ({"load_predictor": "lstm"}, "load_predictor must be one of"),
        ({"load_predictor": "kalman", "kalman_r": -1}, "kalman_r"),
        ({"load_predictor": "kalman", "window": 3}, "window"),
        ({"load_predictor": "arima", "kalman_r": 3.0}, "only load_predictor 'kalman' takes kalman_r"),
    ],
)
def test_bad_predictor_entries_name_the_problem(entry, message):
    with pytest.raises(ConfigError, match=message):
        predictor_spec(entry, where="planner.load_predictor")
