"""A request as the workload layer hands it to the simulator: plain, frozen data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestSpec:
    """One request (one turn of a session).

    ``hash_ids`` name the prompt's content in blocks of ``hash_block_tokens`` tokens: two
    requests share a cached prefix exactly as long as their hash-id lists share a prefix. The
    simulator re-chunks them into its own KV block size. ``arrival_ms`` is set for a session's
    first turn; a later turn becomes ready ``delay_ms`` after the previous turn completes.
    """

    request_id: int
    session_id: int
    turn: int
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    hash_block_tokens: int
    arrival_ms: float | None = None
    delay_ms: float = 0.0
    # How many leading hash ids other requests may share; None means any of them. Blocks past
    # it are known to be unique (synthetic traffic), which lets the simulator skip naming them.
    num_shareable_hash_ids: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Session:
    """The turns of one conversation, in order; the first turn carries the arrival time."""

    session_id: int
    turns: tuple[RequestSpec, ...]

    @property
    def arrival_ms(self) -> float:
        first = self.turns[0].arrival_ms
        return 0.0 if first is None else first
