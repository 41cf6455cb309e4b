"""What must hold before the first evaluation: the perf provider is installed and prices this
model on this system with every backend the search may pick.

Without the check each candidate would come back ``unsupported`` with the same reason, and a
search would spend its whole budget to end with "no feasible candidate"; a config error names the
cause (and the install hint) before anything is replayed. One worker shape per branch, backend
and role is enough: coverage depends on the model, the system and the backend, not the split.
"""

from __future__ import annotations

from aisimulate.errors import ConfigError
from aisimulate.perf.providers import get_perf_model
from aisimulate.perf.shape import ParallelShape
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape
from aisimulate.spica.search_space import SearchPlan


def check_perf_provider(config: SmartSearchConfig, plan: SearchPlan) -> None:
    """Raise the provider's own ConfigError, under ``sweep.perf``, when it cannot price a worker.
    ``perf: auto`` is never refused: it falls back to the analytic model by design."""
    perf = config.sweep.perf
    if perf == "auto":
        return
    space = config.search_space
    model, system = space.resolve_model(), space.resolve_system()
    workers = {
        (backend, shape)
        for branch in plan.branches
        for backend in branch.backends
        for shape in _shapes(next(e.config for e in branch.pool if backend in e.backends))
    }
    for backend, shape in sorted(workers, key=str):
        try:
            get_perf_model(
                perf,
                model=model,
                system=system,
                shape=ParallelShape(
                    tp=shape.tp, attention_dp=shape.attention_dp, moe_tp=shape.moe_tp, moe_ep=shape.moe_ep
                ),
                backend=backend,
                nextn=space.nextn,
            )
        except ConfigError as err:
            text = str(err).removesuffix(f" [{err.where}]")
            raise ConfigError(
                f"{text} (found before the first evaluation: every {backend} candidate would be unsupported)",
                where="sweep.perf",
            ) from None


def _shapes(config: ReplicaConfig | DisaggConfig) -> tuple[WorkerShape, ...]:
    if isinstance(config, DisaggConfig):
        return (config.prefill.shape, config.decode.shape)
    return (config.shape,)
