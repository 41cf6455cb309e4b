"""The optimizer's view of a branch's parallel layouts: a few latent features, projected back.

An optimizer learns nothing from config indices: neighbours in an enumeration need not be alike.
So it sees structured features instead (the share of the budget used, GPUs per engine on a log
scale, attention and FFN modes, the prefill share of a disaggregated pair) and each suggestion is
projected, deterministically and without memory, onto the nearest legal config: fewest mode
mismatches first, then the smallest normalised squared distance, then a stable shape key. Many
suggestions may land on one config; the search loop deduplicates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape

Feature = float | str
Config = ReplicaConfig | DisaggConfig

_MODE_ORDER = {"attention_mode": ("tp", "dp"), "ffn_mode": ("ep", "tp")}


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """A legal config of the branch and the backends whose KV filter it passed."""

    config: Config
    backends: frozenset[str]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: Literal["float", "discrete", "categorical"]
    domain: tuple[Feature, ...]  # (low, high) for float; sorted values otherwise
    default: Feature

    @property
    def constant(self) -> bool:
        """A parameter with one possible value is not given to the optimizer."""
        return self.domain[0] == self.domain[-1] if self.kind == "float" else len(self.domain) == 1


@dataclass(frozen=True, slots=True)
class Projection:
    config: Config
    requested: dict[str, Feature]
    actual: dict[str, Feature]
    distance: float
    mode_projected: bool  # no config had every requested mode

    def metadata(self) -> dict[str, object]:
        """What a trial records about how its layout was chosen."""
        return {
            "requested_features": self.requested,
            "actual_features": self.actual,
            "projection_distance": self.distance,
            "mode_projected": self.mode_projected,
            "actual_parallel_config": asdict(self.config),
        }


def _role_features(prefix: str, shape: WorkerShape, moe: bool) -> dict[str, Feature]:
    features: dict[str, Feature] = {
        f"{prefix}_num_gpus_per_engine_target": float(shape.gpus),
        f"{prefix}_attention_mode": "dp" if shape.attention_dp > 1 else "tp",
    }
    if moe:
        features[f"{prefix}_ffn_mode"] = "ep" if shape.moe_ep > 1 else "tp"
    return features


def _shape_key(config: Config) -> tuple[int, ...]:
    roles = (config.prefill, config.decode) if isinstance(config, DisaggConfig) else (config,)
    return tuple(
        x
        for role in roles
        for x in (
            role.shape.tp,
            1,
            role.shape.attention_dp,
            role.shape.moe_tp,
            role.shape.moe_ep,
            role.replicas,
        )
    )


def _log_midpoint(values: Sequence[float]) -> float:
    """The value nearest, in log space, to the geometric mean of the extremes (ties: smaller)."""
    target = 0.5 * (math.log(values[0]) + math.log(values[-1]))
    return min(values, key=lambda v: (abs(math.log(v) - target), v))


class ParallelSpace:
    """Features of every pool config, the parameters built from them, and the projection."""

    def __init__(self, pool: Sequence[PoolEntry], gpu_budget: int | None = None) -> None:
        if not pool:
            raise ValueError("a branch needs at least one legal parallel config")
        self.pool = list(pool)
        self.gpu_budget = gpu_budget or max(e.config.total_gpus for e in pool)
        self.moe = any(
            role.shape.moe_tp > 1 or role.shape.moe_ep > 1
            for e in pool
            for role in (
                (e.config.prefill, e.config.decode) if isinstance(e.config, DisaggConfig) else (e.config,)
            )
        )
        self.disagg = isinstance(pool[0].config, DisaggConfig)
        self._features = [self.features(e.config) for e in self.pool]
        self.params = self._build_params()

    def features(self, config: Config) -> dict[str, Feature]:
        features: dict[str, Feature] = {"used_gpu_ratio": config.total_gpus / self.gpu_budget}
        if isinstance(config, DisaggConfig):
            features["prefill_gpu_share"] = config.prefill.total_gpus / config.total_gpus
            prefill = _role_features("prefill", config.prefill.shape, self.moe)
            decode = _role_features("decode", config.decode.shape, self.moe)
            for suffix in ("num_gpus_per_engine_target", "attention_mode", "ffn_mode"):
                for role in (prefill, decode):
                    features.update({k: v for k, v in role.items() if k.endswith(suffix)})
        else:
            features.update(_role_features("agg", config.shape, self.moe))
        return features

    def _build_params(self) -> list[Param]:
        params = []
        for name in self._features[0]:
            values = [f[name] for f in self._features]
            if name in ("used_gpu_ratio", "prefill_gpu_share"):
                low, high = min(map(float, values)), max(map(float, values))
                preferred = 1.0 if name == "used_gpu_ratio" else 0.5
                params.append(Param(name, "float", (low, high), min(max(preferred, low), high)))
            elif name.endswith("_num_gpus_per_engine_target"):
                distinct = sorted(set(map(float, values)))
                params.append(Param(name, "discrete", tuple(distinct), _log_midpoint(distinct)))
            else:
                order = _MODE_ORDER[name.split("_", 1)[1]]
                present = tuple(v for v in order if v in values)
                params.append(Param(name, "categorical", present, present[0]))
        return params

    @property
    def searchable(self) -> list[Param]:
        return [p for p in self.params if not p.constant]

    def project(self, requested: Mapping[str, Feature], backend: str) -> Projection:
        """The config nearest to the requested features among those ``backend`` can run."""
        wanted: dict[str, Feature] = {
            p.name: str(requested.get(p.name, p.default))
            if p.kind == "categorical"
            else float(requested.get(p.name, p.default))
            for p in self.params
        }
        supported = [i for i, e in enumerate(self.pool) if backend in e.backends]
        if not supported:
            raise ValueError(f"backend {backend!r} has no valid parallel config in this branch")
        categorical = [p.name for p in self.params if p.kind == "categorical"]
        mismatches = {i: sum(self._features[i][n] != wanted[n] for n in categorical) for i in supported}
        fewest = min(mismatches.values())
        numeric = [p for p in self.params if p.kind != "categorical"]
        spans = {}
        for p in numeric:
            transformed = [self._transform(p, self._features[i][p.name]) for i in supported]
            if (span := max(transformed) - min(transformed)) > 0:
                spans[p.name] = (p, span)

        def distance(i: int) -> float:
            return sum(
                ((self._transform(p, self._features[i][name]) - self._transform(p, wanted[name])) / span) ** 2
                for name, (p, span) in spans.items()
            )

        scored = [
            (distance(i), _shape_key(self.pool[i].config), i) for i in supported if mismatches[i] == fewest
        ]
        best_distance, _, best = min(scored)
        return Projection(
            config=self.pool[best].config,
            requested=wanted,
            actual=dict(self._features[best]),
            distance=best_distance,
            mode_projected=fewest > 0,
        )

    @staticmethod
    def _transform(param: Param, value: Feature) -> float:
        return math.log2(float(value)) if param.kind == "discrete" else float(value)
