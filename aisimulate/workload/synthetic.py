"""Seeded synthetic traffic, as the reference replay's generator makes it.

Sessions arrive at constant gaps (``1000 / request_rate`` ms, the reference's default), Poisson
gaps, a fixed ``arrival_interval_ms``, or in a closed loop of ``concurrency`` requests in flight.
``num_requests`` counts sessions; each has ``turns_per_session`` turns. With
``num_prefix_groups > 0`` each session joins a seeded random group whose first
``round(blocks * shared_prefix_ratio)`` KV blocks every turn shares.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aisimulate.rounding import round_half_away
from aisimulate.workload.lengths import Length, mean_length, sample_lengths
from aisimulate.workload.request import RequestSpec, Session

UNIQUE_ID_BASE = 1 << 48  # unique block ids live far from group ids
# Integers only: tuples of ints hash identically in every process (strings do not).
PREFIX_GROUP_TAG = 0x9E3779B97F4A7C15
# The most prompt blocks a run may name and still be kept for the next replay of the same
# workload (about 30 MiB of sessions; a 10,000-request run of 1k-token prompts names 160,000).
CACHED_HASH_IDS = 1 << 19


class SyntheticWorkload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    isl: Length
    osl: Length
    num_requests: int = Field(ge=1, description="sessions; total requests = num_requests * turns_per_session")
    request_rate: float | None = Field(default=None, gt=0)
    arrival: Literal["constant", "poisson"] = "constant"
    arrival_interval_ms: float | None = Field(default=None, ge=0)
    concurrency: int | None = Field(default=None, ge=1)
    turns_per_session: int = Field(default=1, ge=1)
    inter_turn_delay_ms: float = Field(default=0.0, ge=0)
    shared_prefix_ratio: float = Field(default=0.0, ge=0, le=1)
    num_prefix_groups: int = Field(default=0, ge=0)

    @field_validator("isl", "osl")
    @classmethod
    def _positive(cls, value: Length) -> Length:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @model_validator(mode="after")
    def _one_arrival_mode(self) -> SyntheticWorkload:
        given = [
            k for k in ("request_rate", "arrival_interval_ms", "concurrency") if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "exactly one of request_rate, arrival_interval_ms, concurrency must be set, "
                f"but got {given or 'none'}"
            )
        return self

    @property
    def mode(self) -> Literal["open", "closed"]:
        return "closed" if self.concurrency is not None else "open"

    @property
    def num_total_requests(self) -> int:
        return self.num_requests * self.turns_per_session

    @property
    def mean_isl(self) -> float:
        return mean_length(self.isl)

    def hash_block_tokens(self, block_size: int) -> int:
        """Tokens per hash id: synthetic prompts are named per engine block."""
        return block_size

    def _arrivals(self, rng: np.random.Generator) -> np.ndarray | None:
        n = self.num_requests
        if self.concurrency is not None:
            return None
        if self.arrival_interval_ms is not None:
            return np.arange(n) * float(self.arrival_interval_ms)
        gap = 1000.0 / float(self.request_rate)  # type: ignore[arg-type]
        if self.arrival == "constant":
            return np.arange(n) * gap
        gaps = rng.exponential(gap, n)
        gaps[0] = 0.0
        return np.cumsum(gaps)

    def sessions(self, block_size: int, seed: int = 0) -> Iterator[Session]:
        """Sessions in arrival order; hash ids are per ``block_size`` tokens (the engine's).
        A search replays one workload for many candidates: a run naming up to
        ``CACHED_HASH_IDS`` blocks is generated once per block size and seed (sessions are
        immutable); a longer one is streamed, never held whole."""
        if self.num_total_requests * -(-round(self.mean_isl) // block_size) > CACHED_HASH_IDS:
            return self._generate(block_size, seed)
        return iter(_generated_sessions(self, block_size, seed))

    def _generate(self, block_size: int, seed: int) -> Iterator[Session]:
        rng = np.random.default_rng([seed, 0x5157])
        arrivals = self._arrivals(rng)
        starts = arrivals.tolist() if arrivals is not None else None
        total = self.num_total_requests
        isl = sample_lengths(self.isl, rng, total).tolist()
        osl = sample_lengths(self.osl, rng, total).tolist()
        grouped = self.num_prefix_groups > 0 and self.shared_prefix_ratio > 0
        groups = rng.integers(0, self.num_prefix_groups, self.num_requests).tolist() if grouped else None
        delay, turns_per = self.inter_turn_delay_ms, self.turns_per_session
        blocks_of = [-(-n // block_size) for n in isl]
        ratio = self.shared_prefix_ratio if grouped else 0.0
        shared_of = [round_half_away(blocks * ratio) for blocks in blocks_of]
        next_unique = UNIQUE_ID_BASE
        prefixes: dict[int, list[int]] = {}  # group -> its leading hash ids, hashed once
        rid = 0
        for s in range(self.num_requests):
            turns = []
            for t in range(turns_per):
                shared = shared_of[rid]
                own = blocks_of[rid] - shared
                unique = range(next_unique, next_unique + own)
                next_unique += own
                if shared:
                    group = groups[s]  # type: ignore[index]
                    prefix = prefixes.setdefault(group, [])
                    if len(prefix) < shared:
                        prefix.extend(hash((PREFIX_GROUP_TAG, group, i)) for i in range(len(prefix), shared))
                    ids = (*prefix[:shared], *unique)
                else:
                    ids = tuple(unique)
                turns.append(
                    RequestSpec(
                        request_id=rid,
                        session_id=s,
                        turn=t,
                        input_tokens=isl[rid],
                        output_tokens=osl[rid],
                        hash_ids=ids,
                        hash_block_tokens=block_size,
                        arrival_ms=None if starts is None or t else starts[s],
                        delay_ms=delay if t else 0.0,
                        num_shareable_hash_ids=shared,
                    )
                )
                rid += 1
            yield Session(session_id=s, turns=tuple(turns))


@functools.lru_cache(maxsize=2)
def _generated_sessions(workload: SyntheticWorkload, block_size: int, seed: int) -> tuple[Session, ...]:
    return tuple(workload._generate(block_size, seed))
