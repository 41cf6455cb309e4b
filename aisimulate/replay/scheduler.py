"""Admission policies of the vLLM-style core: the small part where vLLM and TRT-LLM differ.

vLLM admits a waiting request when its whole sequence fits next to the blocks already active
and preempts (recompute) when decoding runs out of blocks; TRT-LLM's GUARANTEED_NO_EVICT
reserves every block a request can need to completion at admission and never preempts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.request import Request


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def fits_alone(rank: Rank, r: Request) -> bool:
    """Whether r respects max_model_len and could finish with the whole pool to itself; a
    request that could not would be preempted forever, so it is refused."""
    spec = rank.spec
    if spec.max_model_len is not None and r.prompt_len >= spec.max_model_len:
        return False
    return ceil_div(r.prompt_len + r.max_output - 1, rank.block_size) <= rank.pool.num_blocks


class AdmissionPolicy(Protocol):
    name: str
    may_preempt: bool
    # Disaggregated decode: destination KV is reserved only while a running slot is free.
    reserves_with_free_slot: bool

    def on_enqueue(self, rank: Rank, r: Request) -> bool:
        """Prepare a request for this rank; False rejects it (it can never run here)."""
        ...

    def admissible(self, rank: Rank, r: Request, hot_blocks: int) -> bool:
        """Whether the waiting head fits, given its blocks already active in the pool."""
        ...

    def destination_tokens(self, r: Request) -> int:
        """Prompt tokens whose blocks a decode rank holds for a prompt computed elsewhere."""
        ...

    def destination_fits(self, rank: Rank, r: Request, cost: int, hot_blocks: int, committed: int) -> bool:
        """Whether a prompt computed elsewhere fits: ``cost`` blocks to take (new ones and
        cached ones to reactivate), ``hot_blocks`` of its blocks already active, ``committed``
        blocks a running stretch has taken but not yet booked."""
        ...


def fits_free_blocks(rank: Rank, cost: int, committed: int) -> bool:
    return cost <= rank.pool.available() - committed


class VllmPolicy:
    """vLLM v1: admit when the whole sequence fits next to the active blocks; preempt on need."""

    name = "vllm"
    may_preempt = True
    reserves_with_free_slot = True

    def on_enqueue(self, rank: Rank, r: Request) -> bool:
        return fits_alone(rank, r)

    def admissible(self, rank: Rank, r: Request, hot_blocks: int) -> bool:
        needed = ceil_div(r.seq_len, rank.block_size) - hot_blocks
        return needed <= rank.pool.num_blocks - rank.pool.num_active

    def destination_tokens(self, r: Request) -> int:
        return r.prompt_len  # the whole prompt's blocks: the first step then takes none

    def destination_fits(self, rank: Rank, r: Request, cost: int, hot_blocks: int, committed: int) -> bool:
        return fits_free_blocks(rank, cost, committed)


class TrtllmPolicy:
    """TRT-LLM GUARANTEED_NO_EVICT: reserve every block a request will need to completion."""

    name = "trtllm"
    may_preempt = False
    reserves_with_free_slot = False

    def on_enqueue(self, rank: Rank, r: Request) -> bool:
        capacity = rank.pool.num_blocks * rank.block_size
        if r.prompt_len >= capacity:
            return False
        r.max_output = min(r.max_output, capacity - r.prompt_len)
        r.final_blocks = ceil_div(r.prompt_len + r.max_output, rank.block_size)
        return True

    def admissible(self, rank: Rank, r: Request, hot_blocks: int) -> bool:
        return self.destination_fits(rank, r, 0, hot_blocks, 0)

    def destination_tokens(self, r: Request) -> int:
        return r.prompt_len

    def destination_fits(self, rank: Rank, r: Request, cost: int, hot_blocks: int, committed: int) -> bool:
        """Everything to completion must fit next to what running requests are promised."""
        available = rank.pool.num_blocks - rank.pool.num_active - rank.reserved_blocks - committed
        return r.final_blocks - hot_blocks <= available


class SglangPolicy:
    """SGLang: admission is budgeted by the extend batch builder (see ``SglangRank``); a request
    is refused only when it could never finish alone."""

    name = "sglang"
    may_preempt = True
    reserves_with_free_slot = False

    def on_enqueue(self, rank: Rank, r: Request) -> bool:
        return fits_alone(rank, r)

    def admissible(self, rank: Rank, r: Request, hot_blocks: int) -> bool:
        return True

    def destination_tokens(self, r: Request) -> int:
        return r.prompt_len - 1  # the last prompt token's slot is taken by the first decode step

    def destination_fits(self, rank: Rank, r: Request, cost: int, hot_blocks: int, committed: int) -> bool:
        return fits_free_blocks(rank, cost, committed)


POLICIES: dict[str, type] = {"vllm": VllmPolicy, "trtllm": TrtllmPolicy, "sglang": SglangPolicy}
