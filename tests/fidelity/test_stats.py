import json
import math

import pytest

from aisimulate.fidelity import error_stats, signed_error_pct


def test_signed_error_is_positive_when_the_prediction_is_too_slow():
    assert signed_error_pct(110.0, 100.0) == pytest.approx(10.0)
    assert signed_error_pct(80.0, 100.0) == pytest.approx(-20.0)


def test_summaries_are_over_absolute_errors():
    stats = error_stats([-30.0, 10.0, 20.0, -5.0])
    assert (stats.n, stats.median_abs_pct, stats.mean_abs_pct) == (4, 15.0, 16.25)


def test_signed_summaries_show_the_direction():
    stats = error_stats([-30.0, 10.0, 20.0, -5.0])
    assert (stats.median_signed_pct, stats.mean_signed_pct) == (2.5, -1.25)
    assert stats.as_dict()["median_signed_pct"] == 2.5


def test_no_rows_give_nan_stats_and_json_nulls():
    stats = error_stats([])
    assert stats.n == 0 and math.isnan(stats.median_abs_pct)
    assert json.loads(json.dumps(stats.as_dict())) == {
        "n": 0,
        "median_abs_pct": None,
        "mean_abs_pct": None,
        "median_signed_pct": None,
        "mean_signed_pct": None,
    }
