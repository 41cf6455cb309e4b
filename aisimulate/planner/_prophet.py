"""Adapter over Prophet, an optional heavy dependency; imported only when a prophet predictor runs."""

from __future__ import annotations

import logging

from aisimulate.errors import ConfigError


def _prophet_class():
    try:
        from prophet import Prophet
    except ImportError:
        raise ConfigError(
            "load_predictor prophet needs prophet: pip install 'aisimulate[prophet]'", where="load_predictor"
        ) from None
    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
    return Prophet


class ProphetWindow:
    """Refit on the last ``window`` points, placed on a synthetic clock one interval apart."""

    def __init__(self, window: int, interval_s: float) -> None:
        self._prophet = _prophet_class()
        self._window = window
        self._interval_s = interval_s

    def forecast(self, history: list[float]) -> float:
        import pandas as pd

        recent = history[-self._window :]
        stamps = pd.date_range(
            "2000-01-01", periods=len(recent) + 1, freq=pd.Timedelta(seconds=self._interval_s)
        )
        model = self._prophet()
        model.fit(pd.DataFrame({"ds": stamps[:-1], "y": recent}))
        return float(model.predict(pd.DataFrame({"ds": stamps[-1:]}))["yhat"].iloc[0])
