"""Mooncake JSONL traces: one request per line, read as a stream.

Fields: ``timestamp`` (or ``created_time``, ms), ``input_length`` (or ``input_tokens``; defaults
to, and is clamped to, ``len(hash_ids) * trace_block_size``), ``output_length`` (or
``output_tokens``, required), ``hash_ids`` (required, non-empty), optional ``session_id`` (rows
with the same id are turns of one session) and ``delay``/``delay_ms`` (wait after the previous
turn completes; inferred from timestamps when absent). Timestamps are rebased so the first
session starts at 0, then divided by ``arrival_speedup_ratio``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aisimulate.errors import ConfigError
from aisimulate.workload.request import RequestSpec, Session


class TraceWorkload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    trace_path: Path
    trace_block_size: int = Field(default=512, ge=1)
    arrival_speedup_ratio: float = Field(default=1.0, gt=0)
    replay_concurrency: int | None = Field(default=None, ge=1)
    max_requests: int | None = Field(default=None, ge=1, description="read at most this many rows")

    @property
    def mode(self) -> Literal["open", "closed"]:
        return "closed" if self.replay_concurrency is not None else "open"

    @property
    def concurrency(self) -> int | None:
        return self.replay_concurrency

    def hash_block_tokens(self, block_size: int) -> int:
        """Tokens per hash id, whatever the engine's block size."""
        del block_size
        return self.trace_block_size

    def rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, parsed row) for each non-blank line; errors name the file and line."""
        path = self.trace_path
        try:
            handle = path.open()
        except OSError as err:
            raise ConfigError(f"cannot open trace: {err.strerror}", where=str(path)) from None
        count = 0
        with handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{line_no}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ConfigError(f"not valid JSON ({err.msg})", where=where) from None
                if not isinstance(row, dict):
                    raise ConfigError("each line must be a JSON object", where=where)
                yield line_no, row
                count += 1
                if self.max_requests is not None and count >= self.max_requests:
                    return

    def _row(
        self, line_no: int, row: dict[str, Any], first_turn: bool
    ) -> tuple[int, int, tuple[int, ...], float | None]:
        """(input tokens, output tokens, hash ids, explicit delay) of one validated row."""
        where = f"{self.trace_path}:{line_no}"
        hash_ids = row.get("hash_ids")
        if not isinstance(hash_ids, list) or not hash_ids or not set(map(type, hash_ids)) <= {int}:
            raise ConfigError("hash_ids must be a non-empty list of integers", where=f"{where}: hash_ids")
        capacity = len(hash_ids) * self.trace_block_size
        n_in = _first(row, "input_length", "input_tokens", default=capacity)
        n_out = _first(row, "output_length", "output_tokens", default=None)
        if not isinstance(n_in, int) or n_in < 1:
            raise ConfigError(
                f"input_length must be a positive integer, got {n_in!r}", where=f"{where}: input_length"
            )
        if n_out is None:
            raise ConfigError("missing output_length", where=where)
        if not isinstance(n_out, int) or n_out < 1:
            raise ConfigError(
                f"output_length must be a positive integer, got {n_out!r}", where=f"{where}: output_length"
            )
        delay = _first(row, "delay", "delay_ms", default=None)
        if delay is not None and (not isinstance(delay, int | float) or not 0 <= delay < float("inf")):
            raise ConfigError(f"delay must be a finite number >= 0, got {delay!r}", where=f"{where}: delay")
        if delay is not None and first_turn:
            raise ConfigError("delay is not allowed on a session's first turn", where=f"{where}: delay")
        return min(n_in, capacity), n_out, tuple(hash_ids), None if delay is None else float(delay)

    def sessions(self, block_size: int = 0, seed: int = 0) -> Iterator[Session]:
        """Sessions in order of first arrival. ``block_size`` and ``seed`` are unused (a trace
        names its own blocks and has no randomness); they keep one interface with synthetic.
        A search replays one trace many times: the parsed sessions are kept while the file is
        unchanged (they are immutable)."""
        del block_size, seed
        try:
            stat = self.trace_path.stat()
        except OSError as err:
            raise ConfigError(f"cannot open trace: {err.strerror}", where=str(self.trace_path)) from None
        return iter(_parsed_sessions(self, str(self.trace_path.resolve()), stat.st_mtime_ns, stat.st_size))

    def _parse_sessions(self) -> tuple[Session, ...]:
        by_key: dict[Any, list[tuple[int, float, tuple[int, int, tuple[int, ...], float | None]]]] = {}
        for rid, (line_no, row) in enumerate(self.rows()):
            stamp = _first(row, "timestamp", "created_time", default=None)
            turns = by_key.setdefault(row.get("session_id", ("row", rid)), [])
            where = f"{self.trace_path}:{line_no}"
            if stamp is None and not turns and self.mode == "open":
                raise ConfigError("missing timestamp on a session's first turn", where=where)
            if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int | float)):
                raise ConfigError(f"timestamp must be a number, got {stamp!r}", where=f"{where}: timestamp")
            fields = self._row(line_no, row, first_turn=not turns)
            at = float(stamp) if stamp is not None else (turns[-1][1] if turns else 0.0)
            turns.append((rid, at, fields))
        if not by_key:
            raise ConfigError("trace has no requests", where=str(self.trace_path))
        start = min(turns[0][1] for turns in by_key.values())
        speed = self.arrival_speedup_ratio
        sessions = []
        for session_id, turns in enumerate(by_key.values()):
            built = []
            for turn, (rid, at, (n_in, n_out, hash_ids, delay)) in enumerate(turns):
                if turn:
                    arrival, gap = (
                        None,
                        (delay if delay is not None else max(at - turns[turn - 1][1], 0.0)) / speed,
                    )
                else:
                    arrival, gap = (at - start) / speed, 0.0
                built.append(
                    RequestSpec(
                        request_id=rid,
                        session_id=session_id,
                        turn=turn,
                        input_tokens=n_in,
                        output_tokens=n_out,
                        hash_ids=hash_ids,
                        hash_block_tokens=self.trace_block_size,
                        arrival_ms=arrival,
                        delay_ms=gap,
                    )
                )
            sessions.append(Session(session_id=session_id, turns=tuple(built)))
        sessions.sort(key=lambda s: (s.arrival_ms, s.session_id))
        return tuple(sessions)


@functools.lru_cache(maxsize=4)
def _parsed_sessions(workload: TraceWorkload, path: str, mtime_ns: int, size: int) -> tuple[Session, ...]:
    """The trace's sessions, parsed once per version of the file (where it is, its mtime and
    size: a relative path names another file from another folder)."""
    del path, mtime_ns, size  # the cache key only
    return workload._parse_sessions()


def _first(row: dict[str, Any], *keys: str, default: Any) -> Any:
    for key in keys:
        if key in row:
            return row[key]
    return default
