"""Token-length distributions for synthetic traffic: a fixed value or a seeded distribution."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class LengthDistribution(BaseModel):
    """``normal`` (rounded, clipped to [min, max]), ``lognormal`` (by its mean and std in tokens)
    or ``uniform`` over [min, max]."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dist: Literal["normal", "lognormal", "uniform"] = "normal"
    mean: float | None = Field(default=None, gt=0)
    std: float = Field(default=0.0, ge=0)
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> LengthDistribution:
        if self.dist in ("normal", "lognormal") and self.mean is None:
            raise ValueError(f"a {self.dist} length needs 'mean'")
        if self.dist == "uniform" and self.max is None:
            raise ValueError("a uniform length needs 'max'")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"`min <= max` must hold, but got (min={self.min}, max={self.max})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "uniform":
            values = rng.integers(self.min, self.max + 1, n)
        elif self.dist == "lognormal" and self.std > 0:
            sigma2 = np.log1p((self.std / self.mean) ** 2)
            values = rng.lognormal(np.log(self.mean) - sigma2 / 2, np.sqrt(sigma2), n)
        else:
            values = rng.normal(self.mean, self.std, n) if self.std > 0 else np.full(n, self.mean)
        values = np.rint(values)
        return np.clip(values, self.min, self.max if self.max is not None else None).astype(np.int64)


Length = int | LengthDistribution


def sample_lengths(spec: Length, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(spec, int):
        return np.full(n, spec, dtype=np.int64)
    return spec.sample(rng, n)


def mean_length(spec: Length) -> float:
    if isinstance(spec, int):
        return float(spec)
    if spec.dist == "uniform":
        return (spec.min + spec.max) / 2  # type: ignore[operator]
    return float(spec.mean)  # type: ignore[arg-type]
