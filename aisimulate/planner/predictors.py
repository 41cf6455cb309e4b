"""One-step-ahead load forecasters for the planner's throughput scaling.

Each forecasts the next interval's value of one series (requests, mean ISL or mean OSL) from the
values seen so far. All share the reference planner's conventions: a NaN observation counts as 0,
leading zeros are skipped (a trace that starts quiet says nothing about its level), a forecaster
returns the last value until it has its minimum number of points, forecasts are clipped at 0, and
with ``log1p`` it models ``log(1 + x)`` and maps back, which suits bursty, multiplicative load.

``constant`` and ``kalman`` are plain numpy; ``arima`` and ``prophet`` need optional packages and
are loaded through one small adapter each, with an install hint when missing.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aisimulate.errors import ConfigError
from aisimulate.workload.loader import pydantic_message

Family = Literal["constant", "arima", "kalman", "prophet"]
FAMILIES: tuple[str, ...] = ("constant", "arima", "kalman", "prophet")


_FAMILY_FIELDS = {
    "prophet": ("prophet_window_size",),
    "kalman": ("kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points"),
}


class PredictorSpec(BaseModel):
    """A forecaster family and its knobs (the planner's ``load_predictor*`` fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    load_predictor: Family
    load_predictor_log1p: bool = False
    prophet_window_size: int = Field(default=50, ge=2)
    kalman_q_level: float = Field(default=1.0, ge=0)
    kalman_q_trend: float = Field(default=0.1, ge=0)
    kalman_r: float = Field(default=10.0, ge=0)
    kalman_min_points: int = Field(default=5, ge=1)

    @model_validator(mode="after")
    def _own_parameters_only(self) -> PredictorSpec:
        # Another family's knob would be ignored without a word: reject it instead (at its
        # default it is harmless, which lets a full dump load back).
        defaults = PredictorSpec.model_fields
        for family, fields in _FAMILY_FIELDS.items():
            stray = [name for name in fields if getattr(self, name) != defaults[name].default]
            if stray and family != self.load_predictor:
                raise ValueError(f"only load_predictor {family!r} takes {', '.join(stray)}")
        return self

    def fields(self) -> dict[str, object]:
        """The flat planner fields of this forecaster: family, log1p and its own knobs only."""
        own = _FAMILY_FIELDS.get(self.load_predictor, ())
        return {
            "load_predictor": self.load_predictor,
            "load_predictor_log1p": self.load_predictor_log1p,
            **{name: getattr(self, name) for name in own},
        }

    @property
    def min_points(self) -> int:
        """Observations before the forecaster stops echoing the last value."""
        return {"constant": 1, "arima": 5, "prophet": 5, "kalman": self.kalman_min_points}[
            self.load_predictor
        ]


def _kalman(q_level: float, q_trend: float, r: float, min_points: int, log1p: bool) -> PredictorSpec:
    return PredictorSpec(
        load_predictor="kalman",
        load_predictor_log1p=log1p,
        kalman_q_level=q_level,
        kalman_q_trend=q_trend,
        kalman_r=r,
        kalman_min_points=min_points,
    )


# The reference's named candidates, in its order (earlier wins ties in forecaster selection).
PRESETS: dict[str, PredictorSpec] = {
    "constant_last": PredictorSpec(load_predictor="constant"),
    "arima_raw": PredictorSpec(load_predictor="arima"),
    "arima_log1p": PredictorSpec(load_predictor="arima", load_predictor_log1p=True),
    "prophet_w20_raw": PredictorSpec(load_predictor="prophet", prophet_window_size=20),
    "prophet_w20_log1p": PredictorSpec(
        load_predictor="prophet", prophet_window_size=20, load_predictor_log1p=True
    ),
    "prophet_w50_raw": PredictorSpec(load_predictor="prophet", prophet_window_size=50),
    "prophet_w50_log1p": PredictorSpec(
        load_predictor="prophet", prophet_window_size=50, load_predictor_log1p=True
    ),
    "kalman_default_raw": _kalman(1.0, 0.1, 10.0, 5, False),
    "kalman_default_log1p": _kalman(1.0, 0.1, 10.0, 5, True),
    "kalman_reactive_raw": _kalman(10.0, 1.0, 5.0, 3, False),
    "kalman_reactive_log1p": _kalman(10.0, 1.0, 5.0, 3, True),
}


def predictor_spec(entry: str | dict, *, where: str = "load_predictor") -> PredictorSpec:
    """A preset id or a dict of ``load_predictor*`` fields (omitted fields take the defaults)."""
    if isinstance(entry, str):
        if entry not in PRESETS:
            raise ConfigError(
                f"unknown load predictor preset {entry!r}; known: {', '.join(PRESETS)}", where=where
            )
        return PRESETS[entry]
    family = entry.get("load_predictor")
    if family not in FAMILIES:
        raise ConfigError(f"load_predictor must be one of {', '.join(FAMILIES)}, got {family!r}", where=where)
    try:
        return PredictorSpec(**entry)
    except ValidationError as err:
        raise ConfigError(pydantic_message(err), where=where) from None


class Model(Protocol):
    """A fitted series model on the (possibly log1p-transformed) scale."""

    def forecast(self, history: list[float]) -> float: ...


class Predictor:
    """The shared conventions around a family's model: NaN, leading zeros, warm-up, log1p, clip."""

    def __init__(self, spec: PredictorSpec, model: Model | None) -> None:
        self.spec = spec
        self.min_points = spec.min_points
        self._model = model  # None: the constant family
        self._history: list[float] = []  # on the model's scale
        self._last = 0.0  # on the original scale

    def add(self, value: float) -> None:
        value = 0.0 if math.isnan(value) else float(value)
        if not self._history and value == 0.0:
            return  # leading zeros carry no level
        self._last = value
        self._history.append(math.log1p(max(value, 0.0)) if self.spec.load_predictor_log1p else value)

    def last(self) -> float:
        return self._last

    def predict(self) -> float:
        if self._model is None or len(self._history) < self.min_points:
            return self._last
        try:
            raw = self._model.forecast(self._history)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            return self._last
        if not math.isfinite(raw):
            return self._last
        value = math.expm1(raw) if self.spec.load_predictor_log1p else raw
        return max(value, 0.0)


class KalmanTrend:
    """Local linear trend (level and slope), filtered incrementally: one update per new point."""

    _F = np.array([[1.0, 1.0], [0.0, 1.0]])

    def __init__(self, spec: PredictorSpec) -> None:
        self._q = np.diag([max(1e-12, spec.kalman_q_level), max(1e-12, spec.kalman_q_trend)])
        self._r = max(1e-9, spec.kalman_r)
        self._x: np.ndarray | None = None
        self._p = np.eye(2) * 1000.0
        self._seen = 0

    def forecast(self, history: list[float]) -> float:
        for z in history[self._seen :]:
            self._step(z)
        self._seen = len(history)
        assert self._x is not None
        return float((self._F @ self._x)[0])

    def _step(self, z: float) -> None:
        if self._x is None:
            self._x = np.array([z, 0.0])  # the first point sets the level
            return
        x = self._F @ self._x
        p = self._F @ self._p @ self._F.T + self._q
        gain = p[:, 0] / (p[0, 0] + self._r)
        self._x = x + gain * (z - x[0])
        self._p = p - np.outer(gain, p[0, :])


def make_predictor(spec: PredictorSpec, interval_s: float = 60.0) -> Predictor:
    """A fresh forecaster; an optional family whose package is missing raises ConfigError."""
    family = spec.load_predictor
    if family == "constant":
        return Predictor(spec, None)
    if family == "kalman":
        return Predictor(spec, KalmanTrend(spec))
    if family == "arima":
        from aisimulate.planner._arima import AutoArima

        return Predictor(spec, AutoArima(log1p_retry=not spec.load_predictor_log1p))
    from aisimulate.planner._prophet import ProphetWindow

    return Predictor(spec, ProphetWindow(spec.prophet_window_size, interval_s))
