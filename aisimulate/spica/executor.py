"""Where evaluations run: in this process, in a pool of spawned worker processes, or on Ray.

An executor takes a batch of samples and yields ``(index, Evaluation)`` as each finishes; the
search loop restores trial order itself, so results never depend on which worker was faster.
``max_eval_seconds`` is a deadline per evaluation, counted from when that evaluation started: a
stuck replay is killed alone (its worker is replaced), and the others keep running.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import Any, Protocol

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.evaluate import Evaluation, Evaluator, run_guarded, timed_out

Sample = Mapping[str, Any]


class Executor(Protocol):
    def run(self, samples: Sequence[Sample]) -> Iterator[tuple[int, Evaluation]]: ...

    def close(self) -> None: ...


class _Timeout(BaseException):
    """Not an Exception, so ``run_guarded`` lets it through to the executor that set the alarm."""


def _raise_timeout(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


class InProcessExecutor:
    """One evaluation at a time in this process. The deadline is a SIGALRM timer where there is
    one (POSIX, main thread); elsewhere an in-process evaluation cannot be interrupted."""

    def __init__(
        self, evaluator: Evaluator, config: SmartSearchConfig, max_eval_seconds: float | None
    ) -> None:
        self._evaluator, self._config, self._limit_s = evaluator, config, max_eval_seconds

    def run(self, samples: Sequence[Sample]) -> Iterator[tuple[int, Evaluation]]:
        for index, sample in enumerate(samples):
            yield index, self._one(sample)

    def _one(self, sample: Sample) -> Evaluation:
        timer = self._limit_s is not None and hasattr(signal, "setitimer")
        if not timer or threading.current_thread() is not threading.main_thread():
            return run_guarded(self._evaluator, self._config, sample)
        assert self._limit_s is not None
        previous = signal.signal(signal.SIGALRM, _raise_timeout)
        signal.setitimer(signal.ITIMER_REAL, self._limit_s)
        try:
            return run_guarded(self._evaluator, self._config, sample)
        except _Timeout:
            return timed_out(self._limit_s)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def close(self) -> None:
        pass


def _serve(conn: Connection, evaluator: Evaluator, config: SmartSearchConfig) -> None:
    """A worker's loop: a sample in, its evaluation out, until told to stop (None). It says when
    it is ready, so start-up (imports) never counts against an evaluation's deadline."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    # A coordinator that was killed (``kill``, out of memory) closes its end: the worker then
    # has nobody to answer and leaves quietly instead of printing a traceback per evaluation.
    with contextlib.suppress(BrokenPipeError, EOFError, ConnectionResetError):
        conn.send("ready")
        while (sample := conn.recv()) is not None:
            conn.send(run_guarded(evaluator, config, sample))


class _Worker:
    def __init__(self, ctx: Any, evaluator: Evaluator, config: SmartSearchConfig) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, evaluator, config), daemon=True)
        self.process.start()
        child.close()

    def wait_ready(self) -> _Worker:
        try:
            self.conn.recv()
        except EOFError:
            self.process.join()
            raise RuntimeError(
                f"an evaluation worker exited while starting (exit code {self.process.exitcode}): spawned "
                "workers re-import the calling script, so it must be a file whose entry point is guarded "
                "by `if __name__ == '__main__':`; or set sweep.parallel_evals: 1"
            ) from None
        return self

    def stop(self, *, kill: bool) -> None:
        if kill:
            self.process.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.process.join(timeout=None if kill else 5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class ProcessExecutor:
    """``workers`` spawned processes (spawn: no forked locks or state, same on every OS), started
    once per search. A worker that times out or dies is replaced."""

    def __init__(
        self, evaluator: Evaluator, config: SmartSearchConfig, workers: int, max_eval_seconds: float | None
    ) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._evaluator, self._config, self._limit_s = evaluator, config, max_eval_seconds
        starting = [_Worker(self._ctx, evaluator, config) for _ in range(workers)]
        self._workers = [worker.wait_ready() for worker in starting]

    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, self._evaluator, self._config).wait_ready()

    def run(self, samples: Sequence[Sample]) -> Iterator[tuple[int, Evaluation]]:
        queue = list(enumerate(samples))
        idle = list(self._workers)
        busy: dict[Connection, tuple[int, float, _Worker]] = {}
        while queue or busy:
            while queue and idle:
                worker = idle.pop()
                index, sample = queue.pop(0)
                worker.conn.send(sample)
                busy[worker.conn] = (index, time.monotonic(), worker)
            for conn in wait(list(busy), timeout=self._wait_s(busy)):
                index, _, worker = busy.pop(conn)  # type: ignore[index]
                try:
                    yield index, conn.recv()  # type: ignore[union-attr]
                    idle.append(worker)
                except EOFError:
                    code = worker.process.exitcode
                    yield index, Evaluation(status="failed", reason=f"worker process died (exit code {code})")
                    idle.append(self._replace(worker))
            for conn, (index, started, worker) in list(busy.items()):
                if self._limit_s is not None and time.monotonic() - started >= self._limit_s:
                    del busy[conn]
                    yield index, timed_out(self._limit_s)
                    idle.append(self._replace(worker))

    def _wait_s(self, busy: Mapping[Connection, tuple[int, float, _Worker]]) -> float | None:
        if self._limit_s is None:
            return None
        first_deadline = min(started for _, started, _ in busy.values()) + self._limit_s
        return max(0.0, first_deadline - time.monotonic())

    def _replace(self, worker: _Worker) -> _Worker:
        worker.stop(kill=True)
        fresh = self._spawn()
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        for worker in self._workers:
            worker.stop(kill=False)
        self._workers = []


def make_executor(config: SmartSearchConfig, evaluator: Evaluator) -> Executor:
    """``local`` with one evaluation at a time runs in-process; ``ray`` needs the extra."""
    sweep = config.sweep
    if sweep.executor == "ray":
        from aisimulate.spica._ray import RayExecutor

        return RayExecutor(evaluator, config, sweep.parallel_evals, sweep.max_eval_seconds, sweep.ray_address)
    workers = min(sweep.parallel_evals, sweep.candidates_per_round)
    if workers <= 1:
        return InProcessExecutor(evaluator, config, sweep.max_eval_seconds)
    return ProcessExecutor(evaluator, config, workers, sweep.max_eval_seconds)
