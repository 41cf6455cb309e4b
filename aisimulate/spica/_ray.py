"""The Ray executor: evaluations as Ray tasks, on ``sweep.ray_address`` or a local Ray started
for the search. Ray is optional, so it is imported here and nowhere else.

At most ``parallel_evals`` tasks are in flight, so a task starts when it is submitted and its
``max_eval_seconds`` deadline counts from then; a task past it is force-cancelled (its worker
process is killed) without touching the others.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from aisimulate.errors import ConfigError
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.evaluate import Evaluation, Evaluator, run_guarded, timed_out
from aisimulate.spica.executor import Sample

INSTALL_HINT = "sweep.executor: ray needs Ray; install with: pip install 'aisimulate[ray]'"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_HINT, where="sweep.executor") from None
    return ray


class RayExecutor:
    def __init__(
        self,
        evaluator: Evaluator,
        config: SmartSearchConfig,
        workers: int,
        max_eval_seconds: float | None,
        address: str | None,
    ) -> None:
        self._ray = ray = _import_ray()
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(
                address=address,
                num_cpus=None if address else workers,
                include_dashboard=False,
                log_to_driver=False,
            )
        self._task = ray.remote(num_cpus=1, max_retries=0)(run_guarded)
        self._evaluator, self._config = evaluator, ray.put(config)
        self._workers, self._limit_s = workers, max_eval_seconds

    def run(self, samples: Sequence[Sample]) -> Iterator[tuple[int, Evaluation]]:
        ray = self._ray
        queue = list(enumerate(samples))
        running: dict[Any, tuple[int, float]] = {}
        while queue or running:
            while queue and len(running) < self._workers:
                index, sample = queue.pop(0)
                running[self._task.remote(self._evaluator, self._config, sample)] = (index, time.monotonic())
            timeout = None
            if self._limit_s is not None:
                first_deadline = min(started for _, started in running.values()) + self._limit_s
                timeout = max(0.0, first_deadline - time.monotonic())
            done, _ = ray.wait(list(running), num_returns=1, timeout=timeout)
            for ref in done:
                index, _ = running.pop(ref)
                try:
                    yield index, ray.get(ref)
                except ray.exceptions.RayError as err:
                    yield (
                        index,
                        Evaluation(status="failed", reason=f"Ray task failed: {type(err).__name__}: {err}"),
                    )
            for ref, (index, started) in list(running.items()):
                if self._limit_s is not None and time.monotonic() - started >= self._limit_s:
                    del running[ref]
                    ray.cancel(ref, force=True)
                    yield index, timed_out(self._limit_s)

    def close(self) -> None:
        if self._owns_ray:
            self._ray.shutdown()
