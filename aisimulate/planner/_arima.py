"""Adapter over pmdarima's auto-ARIMA, the reference planner's choice; imported only when used."""

from __future__ import annotations

import math
import warnings

from aisimulate.errors import ConfigError


def _pmdarima():
    try:
        import pmdarima
        import threadpoolctl  # noqa: F401  (used in forecast; installed with the extra)
    except ImportError:
        raise ConfigError(
            "load_predictor arima needs pmdarima: pip install 'aisimulate[forecast]'", where="load_predictor"
        ) from None
    return pmdarima


class AutoArima:
    """Fit once by auto-ARIMA, then update with each new point rather than refitting.

    A raw fit that degenerates to a pure random walk or mean, order (0, d, 0), is retried on
    ``log1p`` values when ``log1p_retry``: multiplicative bursts often only show structure there.
    """

    def __init__(self, *, log1p_retry: bool) -> None:
        self._pm = _pmdarima()
        self._log1p_retry = log1p_retry
        self._model = None
        self._in_log1p = False
        self._seen = 0

    def forecast(self, history: list[float]) -> float:
        if max(history) == min(history):
            return history[-1]  # a constant series: any fit would only add noise
        # A series of a few dozen points gains nothing from BLAS threads, and on a busy machine
        # their spinning made one auto-ARIMA search 60x slower (33 s instead of 0.5 s).
        from threadpoolctl import threadpool_limits

        with warnings.catch_warnings(), threadpool_limits(limits=1):
            warnings.simplefilter("ignore")
            if self._model is None:
                self._fit(history)
            elif len(history) > self._seen:
                self._model.update([self._scale(v) for v in history[self._seen :]])
            self._seen = len(history)
            value = float(self._model.predict(n_periods=1)[0])
        return math.expm1(value) if self._in_log1p else value

    def _scale(self, value: float) -> float:
        return math.log1p(max(value, 0.0)) if self._in_log1p else value

    def _fit(self, history: list[float]) -> None:
        auto = self._pm.auto_arima
        model = auto(history, suppress_warnings=True, error_action="ignore")
        p, _, q = model.order
        if self._log1p_retry and p == 0 and q == 0:
            self._in_log1p = True
            model = auto([self._scale(v) for v in history], suppress_warnings=True, error_action="ignore")
        self._model = model
