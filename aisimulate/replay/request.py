"""Mutable per-request state inside a replay, owned by the rank that holds the request."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aisimulate.replay.kv_cache import unit_keys
from aisimulate.workload.request import RequestSpec


@dataclass(slots=True, eq=False)
class Request:
    spec: RequestSpec
    arrival_ms: float
    prompt_len: int
    max_output: int
    block_size: int
    # Names of the prompt's shareable full units; later blocks are this request's own.
    prompt_keys: list[int] = field(default_factory=list)

    num_computed: int = 0  # tokens whose KV is computed
    generated: int = 0  # tokens emitted
    n_keyed: int = 0  # leading blocks held by name (whole units)
    n_blocks: int = 0  # all blocks held (named + anonymous), outside the fast decode phase
    run_start: int = 0  # where the blocks it left behind when last preempted begin
    admit_seq: int = -1  # running order
    scheduled_take: int = 0  # tokens scheduled in the current pass

    # Decode phase: from rank pass dec_pass0 on, starting from dec_nc0 computed and dec_gen0
    # emitted tokens; each pass adds what the rank's ledger says it emits.
    dec_pass0: int = -1
    dec_nc0: int = 0
    dec_gen0: int = 0
    finish_pass: int = -1
    # Speculative decoding: tokens out after each step of the current decode phase, drawn when
    # it started.
    bursts: np.ndarray | None = None

    final_blocks: int = 0  # TRT-LLM: blocks reserved to completion

    # metrics
    worker: int = -1
    rank: int = -1
    first_admit_ms: float | None = None
    first_reused_tokens: int = 0
    max_reused_tokens: int = 0
    first_token_ms: float | None = None
    second_token_ms: float | None = None
    last_token_ms: float | None = None
    finish_ms: float | None = None
    preemptions: int = 0
    rejected: bool = False
    prefill_worker: int = -1  # disaggregated: where the prompt was computed
    kv_transfer_ms: float | None = None
    router_queue_ms: float = 0.0  # time held by the router's admission queue
    enqueued_ms: float = 0.0  # when it reached its rank's waiting queue
    parked_ms: float | None = None  # when it was parked to onboard lower-tier KV
    onboarded: bool = False

    @classmethod
    def from_spec(
        cls,
        spec: RequestSpec,
        arrival_ms: float,
        block_size: int,
        *,
        max_model_len: int | None,
        prompt_keys: list[int] | None = None,
    ) -> Request:
        """``prompt_keys``: the prompt's unit names when a copy of the request at the same block
        size already has them (a prefilled prompt's decode copy); never mutated."""
        max_output = spec.output_tokens
        if max_model_len is not None:
            max_output = max(min(max_output, max_model_len - spec.input_tokens), 1)
        if prompt_keys is None:
            shareable = spec.input_tokens
            if spec.num_shareable_hash_ids is not None:
                shareable = min(shareable, spec.num_shareable_hash_ids * spec.hash_block_tokens)
            prompt_keys = (
                unit_keys(spec.hash_ids, spec.hash_block_tokens, block_size, shareable) if shareable else []
            )
        return cls(spec, arrival_ms, spec.input_tokens, max_output, block_size, prompt_keys)

    @property
    def rid(self) -> int:
        return self.spec.request_id

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.generated
