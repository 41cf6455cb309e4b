"""The planner: how many workers each role should have, decided tick by tick.

It is a plain object that the replay's event loop drives (``first_tick_ms``, then ``tick`` at
each time it asks for). Two loops, as in the reference planner:

- **load** (every ``load_adjustment_interval_seconds``): reactive, one worker at a time. With
  ``optimization_target: sla`` it predicts each engine's next TTFT / ITL from pass-time
  regressions learnt on the engines' forward-pass metrics; otherwise it compares queue and KV
  use with static thresholds.
- **throughput** (every ``throughput_adjustment_interval_seconds``): predictive. It forecasts
  the next interval's requests, ISL and OSL and sizes each role by one engine's capacity under
  the SLA; its answer is a floor for the load loop.

The replay applies the targets: new workers start (``startup_time``), removed ones drain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aisimulate.planner.config import PlannerConfig
from aisimulate.planner.fpm import ForwardPassMetrics, MovingAverage, PassRegression
from aisimulate.planner.predictors import Predictor, make_predictor

# (prefill tokens, decode requests, decode KV tokens) -> ms: the perf model, for seeding only.
PassTime = Callable[[float, float, float], float]

_EPS_MS = 1e-6
_CAPACITY_CANDIDATES = 16  # batch sizes tried when sizing one engine
_SEED_CONTEXT_TOKENS = 2048  # context of the seeded decoders in an aggregated engine


@dataclass(frozen=True, kw_only=True)
class RoleCapability:
    """What one engine of a role can hold, and a probe of its pass time to seed the fit."""

    gpus_per_engine: int
    max_num_batched_tokens: int
    max_num_seqs: int
    context_length: int
    max_kv_tokens: int
    accept_length: float = 1.0
    ranks_per_engine: int = 1  # attention-DP ranks: each reports its own metrics
    pass_time_ms: PassTime | None = None


@dataclass(frozen=True, kw_only=True)
class RoleState:
    """A role at a tick: the latest metrics of each routable engine and the fleet's states."""

    fpm: list[ForwardPassMetrics]
    active: int
    starting: int = 0
    draining: int = 0

    @property
    def provisioned(self) -> int:
        """Workers that count towards the target: serving or about to."""
        return self.active + self.starting


@dataclass(frozen=True, kw_only=True)
class TrafficWindow:
    """Traffic since the previous tick: offered requests and the lengths of finished ones."""

    num_requests: int = 0
    num_completed: int = 0
    sum_input_tokens: int = 0
    sum_output_tokens: int = 0
    sum_cached_tokens: int = 0

    def __add__(self, other: TrafficWindow) -> TrafficWindow:
        return TrafficWindow(
            num_requests=self.num_requests + other.num_requests,
            num_completed=self.num_completed + other.num_completed,
            sum_input_tokens=self.sum_input_tokens + other.sum_input_tokens,
            sum_output_tokens=self.sum_output_tokens + other.sum_output_tokens,
            sum_cached_tokens=self.sum_cached_tokens + other.sum_cached_tokens,
        )


@dataclass(frozen=True, kw_only=True)
class Decision:
    targets: dict[str, int]  # roles whose worker count should change, and to what
    next_tick_ms: float | None


@dataclass
class PlannerStats:
    ticks: int = 0
    scale_ups: int = 0
    scale_downs: int = 0
    events: list[dict[str, object]] = field(default_factory=list)


# Static thresholds per target: (up, up inclusive, down, down inclusive). Prefill values are
# queued prompt tokens per context length (``load``: raw tokens); decode values are KV use as a
# fraction of the engine's KV (``load``: percent).
_STATIC = {
    "throughput": {"prefill": (1.0, True, 0.1, False), "decode": (1.0, False, 0.6, False)},
    "latency": {"prefill": (0.1, True, 0.0, True), "decode": (0.4, False, 0.1, False)},
}


def _crosses(value: float, threshold: float, inclusive: bool) -> bool:
    return value >= threshold if inclusive else value > threshold


def _below(value: float, threshold: float, inclusive: bool) -> bool:
    return value <= threshold if inclusive else value < threshold


class _RoleModel:
    """One role's learnt pass-time model and running averages."""

    def __init__(self, role: str, capability: RoleCapability, config: PlannerConfig) -> None:
        self.role = role
        self.cap = capability
        self.regression = PassRegression(
            1 if role == "prefill" else 2,
            max_samples=config.max_num_fpm_samples,
            bucket_size=config.fpm_sample_bucket_size,
            min_observations=config.load_min_observations,
        )
        window = config.max_num_fpm_samples
        self.avg_isl = MovingAverage(window)
        self.avg_decode_len = MovingAverage(window)
        self.avg_prefill_tokens = MovingAverage(window)
        self.observations = 0
        if capability.pass_time_ms is not None and config.benchmark_granularity:
            self._seed(capability.pass_time_ms, config.benchmark_granularity)

    def features(self, prefill_tokens: float, decode_requests: float, decode_kv: float) -> tuple[float, ...]:
        if self.role == "prefill":
            return (prefill_tokens,)
        if self.role == "decode":
            return (decode_requests, decode_kv)
        return (prefill_tokens, decode_kv)

    def _seed(self, probe: PassTime, points: int) -> None:
        """Pre-load the fit with the perf model on a grid, as the reference does with its
        pre-deployment benchmark; later observations displace these samples."""
        cap = self.cap
        # Geometric grids: most passes are small, and a line fitted to evenly spaced points
        # would be pinned by the largest ones (a decode pass came out 6x too cheap).
        tokens = np.unique(np.geomspace(16, cap.max_num_batched_tokens, points).round())
        batch = np.unique(np.geomspace(1, cap.max_num_seqs, points).round())
        kv = np.unique(np.geomspace(min(1024, cap.max_kv_tokens), cap.max_kv_tokens, points).round())
        if self.role == "prefill":
            grid = [(t, 0.0, 0.0) for t in tokens]
        elif self.role == "decode":
            grid = [(0.0, b, min(k, b * cap.context_length)) for b in batch for k in kv]
        else:
            # Decoders at a typical context, alone or beside a prompt chunk.
            context = min(cap.context_length, _SEED_CONTEXT_TOKENS)
            grid = [(t, b, b * context) for t in np.concatenate(([0.0], tokens)) for b in batch]
        for prefill, requests, context in grid:
            self.regression.add(self.features(prefill, requests, context), probe(prefill, requests, context))

    def observe(self, fpm: ForwardPassMetrics) -> None:
        if not fpm.fresh:
            return
        self.observations += 1
        self.regression.add(
            self.features(fpm.sum_prefill_tokens, fpm.num_decode_requests, fpm.sum_decode_kv_tokens),
            fpm.wall_time_ms,
        )
        if fpm.num_prefill_requests:
            self.avg_isl.add(fpm.sum_prefill_tokens / fpm.num_prefill_requests)
        if fpm.num_decode_requests:
            self.avg_decode_len.add(fpm.sum_decode_kv_tokens / fpm.num_decode_requests)
        self.avg_prefill_tokens.add(fpm.sum_prefill_tokens)

    def pass_ms(self, prefill_tokens: float, decode_requests: float, decode_kv: float) -> float:
        return self.regression.predict(*self.features(prefill_tokens, decode_requests, decode_kv))

    def prefill_ms(self, tokens: float, decode_kv: float = 0.0) -> float:
        """Time to prefill ``tokens`` in chunks of the token budget."""
        chunk = self.cap.max_num_batched_tokens
        full, rest = divmod(math.ceil(tokens), chunk)
        total = full * self.pass_ms(chunk, 0, decode_kv)
        return total + (self.pass_ms(rest, 0, decode_kv) if rest else 0.0)

    def itl_ms(self, decode_requests: float, decode_kv: float) -> float:
        prefill = self.avg_prefill_tokens.value() if self.role == "agg" else 0.0
        return self.pass_ms(prefill, decode_requests, decode_kv) / self.cap.accept_length


class Planner:
    def __init__(
        self, config: PlannerConfig, capabilities: dict[str, RoleCapability], *, initial: dict[str, int]
    ) -> None:
        if not (config.enable_load_scaling or config.enable_throughput_scaling):
            raise ValueError("a planner needs enable_load_scaling or enable_throughput_scaling")
        self.config = config
        self.roles = {role: _RoleModel(role, cap, config) for role, cap in capabilities.items()}
        gpus = sum(initial[role] * cap.gpus_per_engine for role, cap in capabilities.items())
        self.max_gpus = config.max_gpu_budget if config.max_gpu_budget is not None else gpus
        self.stats = PlannerStats()
        self._window = TrafficWindow()
        self._floor: dict[str, int] = {}
        self._hit_rate = 0.0
        self._isl = self._osl = 0.0
        load_ms = config.load_adjustment_interval_seconds * 1000.0
        throughput_ms = config.throughput_adjustment_interval_seconds * 1000.0
        self._next_load = load_ms if config.enable_load_scaling else math.inf
        self._next_throughput = throughput_ms if config.enable_throughput_scaling else math.inf
        self._predictors: list[Predictor] = []
        if config.enable_throughput_scaling:
            spec = config.predictor()
            interval_s = config.throughput_adjustment_interval_seconds
            self._predictors = [make_predictor(spec, interval_s) for _ in range(3)]

    def first_tick_ms(self) -> float:
        return min(self._next_load, self._next_throughput)

    # ---- the tick ---------------------------------------------------------------------------
    def tick(self, now_ms: float, roles: dict[str, RoleState], window: TrafficWindow) -> Decision:
        config = self.config
        self.stats.ticks += 1
        for role, state in roles.items():
            for fpm in state.fpm:
                self.roles[role].observe(fpm)
        self._window = self._window + window
        if window.sum_input_tokens:
            self._hit_rate = window.sum_cached_tokens / window.sum_input_tokens
        targets = {role: state.provisioned for role, state in roles.items()}
        reasons: dict[str, str] = {}
        if now_ms + _EPS_MS >= self._next_throughput:
            self._next_throughput += config.throughput_adjustment_interval_seconds * 1000.0
            self._floor = self._throughput_targets(roles)
            for role, floor in self._floor.items():
                if floor != targets[role]:
                    targets[role], reasons[role] = floor, "throughput"
        if now_ms + _EPS_MS >= self._next_load:
            self._next_load += config.load_adjustment_interval_seconds * 1000.0
            for role, state in roles.items():
                step = self._load_step(role, state)
                if step:
                    floor = self._floor.get(role, 0)
                    targets[role] = max(targets[role] + step, floor, config.min_endpoints(role))
                    reasons[role] = "load"
        targets = self._fit_budget(targets)
        changes: dict[str, int] = {}
        for role, state in roles.items():
            target = targets[role]
            if target > state.provisioned and state.starting:
                continue  # capacity is already on its way: wait for it before adding more
            if target != state.provisioned:
                changes[role] = target
                up = target > state.provisioned
                self.stats.scale_ups += up
                self.stats.scale_downs += not up
                self.stats.events.append(
                    {
                        "time_ms": now_ms,
                        "role": role,
                        "from": state.provisioned,
                        "to": target,
                        "reason": reasons.get(role, "budget"),
                    }
                )
        next_tick = self.first_tick_ms()
        return Decision(targets=changes, next_tick_ms=None if math.isinf(next_tick) else next_tick)

    # ---- load loop --------------------------------------------------------------------------
    def _load_step(self, role: str, state: RoleState) -> int:
        """+1, -1 or 0 workers for ``role``."""
        model = self.roles[role]
        if model.observations < self.config.load_min_observations or not state.fpm:
            return 0  # cold start: too little seen to judge
        sla = self.config.optimization_target == "sla"
        if sla and not model.regression.ready:
            return 0
        vote = self._sla_vote if sla else self._static_vote
        sides = ("prefill", "decode") if role == "agg" else (role,)
        votes = [vote(side, model, state) for side in sides]
        if any(vote > 0 for vote in votes):
            return 1
        if all(vote < 0 for vote in votes) and state.active > self.config.min_endpoints(role):
            return -1
        return 0

    def _ttft_ms(self, model: _RoleModel, fpm: ForwardPassMetrics, queue_scale: float) -> float:
        isl = model.avg_isl.value(default=float(fpm.sum_prefill_tokens or 1))
        tokens = (fpm.sum_queued_prefill_tokens * queue_scale + isl) * (1.0 - self._hit_rate)
        return model.prefill_ms(max(tokens, 1.0), fpm.sum_decode_kv_tokens)

    def _sla_vote(self, side: str, model: _RoleModel, state: RoleState) -> int:
        config, n = self.config, state.active
        shrink = n / (n - 1) if n > 1 else math.inf
        if side == "prefill":
            if all(self._ttft_ms(model, fpm, 1.0) > config.ttft_ms for fpm in state.fpm):
                return 1
            for fpm in state.fpm:
                own = self._ttft_ms(model, fpm, 0.0)
                budget = (config.ttft_ms - own) * config.sensitivity
                if not math.isfinite(shrink) or self._ttft_ms(model, fpm, shrink) - own >= budget:
                    return 0
            return -1
        avg_len = model.avg_decode_len.value()
        estimates = []
        for fpm in state.fpm:
            requests = fpm.num_decode_requests + fpm.num_queued_decode
            kv = fpm.sum_decode_kv_tokens + fpm.sum_queued_decode_kv_tokens
            estimates.append(model.itl_ms(requests + 1, kv + avg_len))
        if all(itl > config.itl_ms for itl in estimates):
            return 1
        for fpm in state.fpm:
            requests = (fpm.num_decode_requests + fpm.num_queued_decode) * shrink
            kv = (fpm.sum_decode_kv_tokens + fpm.sum_queued_decode_kv_tokens) * shrink
            if not math.isfinite(shrink) or kv >= model.cap.max_kv_tokens:
                return 0
            if model.itl_ms(requests, kv) >= config.itl_ms * config.sensitivity:
                return 0
        return -1

    def _static_vote(self, side: str, model: _RoleModel, state: RoleState) -> int:
        config, cap = self.config, model.cap
        if side == "prefill":
            values = [fpm.sum_queued_prefill_tokens for fpm in state.fpm]
            if config.optimization_target == "load":
                up, down = config.prefill_scale_up_queue_tokens, config.prefill_scale_down_queue_tokens
                rule = (up, True, down, True)
            else:
                values = [v / cap.context_length for v in values]
                rule = _STATIC[config.optimization_target]["prefill"]
        else:
            values = [
                (fpm.sum_decode_kv_tokens + fpm.sum_queued_decode_kv_tokens) / cap.max_kv_tokens
                for fpm in state.fpm
            ]
            if config.optimization_target == "load":
                values = [v * 100.0 for v in values]
                rule = (config.decode_scale_up_kv_rate, True, config.decode_scale_down_kv_rate, True)
            else:
                rule = _STATIC[config.optimization_target]["decode"]
        up, up_inclusive, down, down_inclusive = rule
        if any(_crosses(v, up, up_inclusive) for v in values):
            return 1
        n = state.active
        # The survivors take the removed worker's share: they must not cross right back.
        calm = n > 1 and all(_below(v, down, down_inclusive) for v in values)
        return -1 if calm and not _crosses(max(values) * n / (n - 1), up, up_inclusive) else 0

    # ---- throughput loop ------------------------------------------------------------------
    def _throughput_targets(self, roles: dict[str, RoleState]) -> dict[str, int]:
        config, window = self.config, self._window
        self._window = TrafficWindow()
        if window.num_completed:
            self._isl = window.sum_input_tokens / window.num_completed
            self._osl = window.sum_output_tokens / window.num_completed
        requests, isl, osl = self._predictors
        requests.add(float(window.num_requests))
        isl.add(self._isl)
        osl.add(self._osl)
        interval_s = config.throughput_adjustment_interval_seconds
        demand_rps = requests.predict() / interval_s
        next_isl, next_osl = max(isl.predict(), 1.0), max(osl.predict(), 1.0)
        out = {}
        for role, state in roles.items():
            model = self.roles[role]
            current = state.provisioned
            low = config.min_endpoints(role)
            if not model.regression.ready or not self._isl:
                out[role] = max(current, low)
                continue
            rps = self._engine_rps(role, model, next_isl, next_osl) * model.cap.ranks_per_engine
            wanted = max(math.ceil(demand_rps / rps - 1e-9), low) if rps > 0 else current
            step = config.max_throughput_scaling_replicas
            capped = min(max(wanted, current - step), current + step)
            out[role] = max(capped, low)
        return out

    def _engine_rps(self, role: str, model: _RoleModel, isl: float, osl: float) -> float:
        """Requests per second one engine sustains within the SLA (the best batch size that
        meets it, else the best overall)."""
        config, cap = self.config, model.cap
        eff_isl = max(math.ceil(isl * (1.0 - self._hit_rate)), 1)
        context = isl + osl // 2
        if role == "prefill":
            largest = max(min(cap.max_num_seqs, cap.max_num_batched_tokens // eff_isl), 1)
        else:
            largest = max(min(cap.max_num_seqs, int(cap.max_kv_tokens // context)), 1)
        batches = np.unique(np.linspace(1, largest, min(largest, _CAPACITY_CANDIDATES)).round())
        best_ok = best_any = 0.0
        for b in batches:
            if role == "prefill":
                ttft = model.prefill_ms(b * eff_isl)
                rps, ok = b / (ttft / 1000.0), ttft <= config.ttft_ms
            elif role == "decode":
                itl = model.itl_ms(b, b * context)
                rps, ok = b / (osl * itl / 1000.0), itl <= config.itl_ms
            else:
                # Steady state: each pass also prefills its share of the arriving prompts.
                share = min(b * eff_isl / osl, cap.max_num_batched_tokens)
                itl = model.pass_ms(share, b, b * context) / cap.accept_length
                ttft = model.prefill_ms(eff_isl, b * context)
                rps = b / ((ttft + osl * itl) / 1000.0)
                ok = itl <= config.itl_ms and ttft <= config.ttft_ms
            best_any = max(best_any, rps)
            if ok:
                best_ok = max(best_ok, rps)
        return best_ok or best_any

    # ---- budget -----------------------------------------------------------------------------
    def _fit_budget(self, targets: dict[str, int]) -> dict[str, int]:
        """Clamp targets into [min_gpu_budget, max_gpu_budget] GPUs, proportionally; each role
        keeps its min_endpoint even when that alone exceeds the budget."""
        config = self.config
        gpus = {role: model.cap.gpus_per_engine for role, model in self.roles.items()}
        low = {role: config.min_endpoints(role) for role in targets}
        out = {role: max(n, low[role]) for role, n in targets.items()}
        if _gpus_of(out, gpus) > self.max_gpus:
            factor = self.max_gpus / _gpus_of(out, gpus)
            out = _trim(
                {role: max(math.floor(n * factor), low[role]) for role, n in out.items()},
                low,
                gpus,
                self.max_gpus,
            )
        if config.min_gpu_budget > 0 and _gpus_of(out, gpus) < config.min_gpu_budget:
            factor = config.min_gpu_budget / max(_gpus_of(out, gpus), 1)
            out = _trim({role: math.ceil(n * factor) for role, n in out.items()}, low, gpus, self.max_gpus)
        return out


def _gpus_of(workers: dict[str, int], gpus: dict[str, int]) -> int:
    return sum(n * gpus[role] for role, n in workers.items())


def _trim(workers: dict[str, int], low: dict[str, int], gpus: dict[str, int], budget: int) -> dict[str, int]:
    """Take workers one at a time from the role using the most GPUs until ``budget`` holds (or
    every role is at its floor): rounding may leave a proportional clamp a little over."""
    workers = dict(workers)
    while _gpus_of(workers, gpus) > budget:
        above = [role for role in workers if workers[role] > low[role]]
        if not above:
            break
        workers[max(above, key=lambda role: (workers[role] * gpus[role], role))] -= 1
    return workers
