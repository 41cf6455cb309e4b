"""The one question the replay asks the perf layer: how long does this engine pass take?

A pass is described by aggregates, never by per-request lists, so that a call costs the same
whatever the batch size. The prefill part is the chunks scheduled this pass (new tokens and the
context already cached before each chunk); the decode part is the sequences that emit a token.
The worker's KV state rides along because some providers (the reference's polynomial) need it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from aisimulate.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchShape:
    """One engine pass of one (attention-DP) rank."""

    prefill_tokens: int = 0  # new prompt tokens over all chunks
    prefill_requests: int = 0  # chunks (requests with prompt tokens scheduled)
    prefill_context_tokens: int = 0  # sum over chunks of tokens cached before the chunk
    # sum over chunks of new * (context + (new + 1) / 2): the causal attention work. None means
    # "chunks of equal size and context", which aggregates alone determine.
    prefill_attention_pairs: float | None = None
    decode_requests: int = 0  # sequences emitting this pass
    decode_context_tokens: int = 0  # sum of their context lengths
    tokens_per_step: float = 1.0  # tokens verified per decode sequence (1 + nextn with MTP)
    active_kv_tokens: int = 0  # physical KV tokens in use on the worker (shared blocks once)
    kv_capacity_tokens: int = 0  # the worker's KV capacity
    # The worker's attention-DP ranks in this lock-step pass: the tokens all of them carry and
    # the most any one carries (0: every rank carries this one's, see ``PerfModel.group_time_ms``).
    group_tokens: float = 0.0
    busiest_rank_tokens: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "group_tokens",
            "busiest_rank_tokens",
            "prefill_tokens",
            "prefill_requests",
            "prefill_context_tokens",
            "decode_requests",
            "decode_context_tokens",
            "active_kv_tokens",
            "kv_capacity_tokens",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"`{name} >= 0` must hold, but got {getattr(self, name)}", where=name)
        if self.prefill_tokens and not self.prefill_requests:
            raise ConfigError("prefill_tokens > 0 needs prefill_requests >= 1", where="prefill_requests")
        if self.tokens_per_step < 1:
            raise ConfigError(
                f"`tokens_per_step >= 1` must hold, but got {self.tokens_per_step}", where="tokens_per_step"
            )

    @property
    def attention_pairs(self) -> float:
        if self.prefill_attention_pairs is not None:
            return self.prefill_attention_pairs
        return equal_chunk_pairs(self.prefill_tokens, self.prefill_requests, self.prefill_context_tokens)

    @classmethod
    def from_chunks(
        cls,
        chunks: Iterable[tuple[int, int]] = (),
        decode_contexts: Iterable[int] = (),
        **kwargs: Any,
    ) -> BatchShape:
        """Build the aggregates from (new_tokens, context_tokens) chunks and decode contexts."""
        chunks = list(chunks)
        contexts = list(decode_contexts)
        return cls(
            prefill_tokens=sum(n for n, _ in chunks),
            prefill_requests=len(chunks),
            prefill_context_tokens=sum(c for _, c in chunks),
            prefill_attention_pairs=float(sum(n * (c + (n + 1) / 2) for n, c in chunks)),
            decode_requests=len(contexts),
            decode_context_tokens=sum(contexts),
            **kwargs,
        )


def equal_chunk_pairs(tokens: float, requests: float, context_tokens: float) -> float:
    """Causal attention pairs of ``requests`` equal chunks sharing the given totals."""
    if not requests:
        return 0.0
    return tokens * context_tokens / requests + tokens * (tokens / requests + 1) / 2


@dataclass(frozen=True, kw_only=True, slots=True)
class PassBreakdown:
    """Where a pass's time goes, in milliseconds."""

    gemm_ms: float = 0.0
    attention_ms: float = 0.0
    moe_ms: float = 0.0
    comm_ms: float = 0.0
    overhead_ms: float = 0.0
    unattributed_ms: float = 0.0  # providers that only know the total (polynomial, table)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return (
            self.gemm_ms
            + self.attention_ms
            + self.moe_ms
            + self.comm_ms
            + self.overhead_ms
            + self.unattributed_ms
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        extra = out.pop("extra")
        return {**out, "total_ms": self.total_ms, **extra}


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchArrays:
    """Many passes at once (numpy arrays of equal length), for fast-forwarding decode stretches."""

    decode_requests: np.ndarray
    decode_context_tokens: np.ndarray
    prefill_tokens: np.ndarray | None = None
    prefill_requests: np.ndarray | None = None
    prefill_context_tokens: np.ndarray | None = None
    tokens_per_step: float = 1.0
    active_kv_tokens: np.ndarray | None = None
    kv_capacity_tokens: float = 0.0

    @property
    def has_prefill(self) -> bool:
        return self.prefill_tokens is not None

    def filled(self) -> tuple[np.ndarray, ...]:
        d = np.asarray(self.decode_requests, dtype=np.float64)
        zeros = np.zeros_like(d)
        if not self.has_prefill:
            active = (
                zeros
                if self.active_kv_tokens is None
                else np.asarray(self.active_kv_tokens, dtype=np.float64)
            )
            return (
                zeros,
                zeros,
                zeros,
                zeros,
                d,
                np.asarray(self.decode_context_tokens, dtype=np.float64),
                active,
            )

        def arr(x: np.ndarray | None) -> np.ndarray:
            return zeros if x is None else np.asarray(x, dtype=np.float64)

        p, r, c = arr(self.prefill_tokens), arr(self.prefill_requests), arr(self.prefill_context_tokens)
        safe_r = np.where(r > 0, r, 1.0)
        pairs = np.where(r > 0, p * c / safe_r + p * (p / safe_r + 1) / 2, 0.0)
        return p, r, pairs, c, d, arr(self.decode_context_tokens), arr(self.active_kv_tokens)


class PassRecord(NamedTuple):
    """A priced pass: its work and duration, as a planner's forward-pass metrics read them. The
    replay keeps each rank's latest (a decode stretch records its last pass)."""

    prefill_tokens: int
    prefill_requests: int
    decode_requests: int
    decode_context_tokens: int
    duration_ms: float


@runtime_checkable
class PerfModel(Protocol):
    """What every latency provider answers. Implementations precompute per-shape constants."""

    name: str

    def pass_time_ms(self, batch: BatchShape) -> float:
        """Latency of one pass; a handful of arithmetic operations."""
        ...

    def explain(self, batch: BatchShape) -> PassBreakdown:
        """The same latency, split by component."""
        ...

    def pass_times_ms(self, batches: BatchArrays) -> np.ndarray:
        """Vectorised latency of many passes."""
        ...

    def time_ms(
        self,
        prefill_tokens: float,
        prefill_requests: float,
        attention_pairs: float,
        prefill_context_tokens: float,
        decode_requests: float,
        decode_context_tokens: float,
        tokens_per_step: float = 1.0,
        active_kv_tokens: float = 0.0,
        kv_capacity_tokens: float = 0.0,
    ) -> float:
        """The scalar hot path: plain numbers in (the fields of :class:`BatchShape`), ms out."""
        ...

    def group_time_ms(
        self, pass_args: tuple[float, ...], group_tokens: float, busiest_rank_tokens: float
    ) -> float:
        """``time_ms(*pass_args)`` of one attention-DP rank's pass when the worker's ranks are not
        equally loaded: ``group_tokens`` all ranks carry in this lock-step pass and the
        ``busiest_rank_tokens`` one rank carries (``time_ms`` assumes every rank carries this
        one's). Providers that price no rank group answer ``time_ms``."""
        ...

    def decode_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[float], float]:
        """``time_ms`` of a decode-only pass of these sequences (at least one) as a function of
        their summed context (which is also the active KV). A decode stretch prices many such
        passes in which only the context grows, so a provider binds everything else once."""
        ...

    def decode_times_ms(
        self,
        decode_requests: float,
        tokens_per_step: float,
        kv_capacity_tokens: float,
        context_tokens: np.ndarray,
    ) -> np.ndarray:
        """The same passes priced at once, one per summed context: a long stretch's prices, in
        one vectorised call."""
        ...

    def decode_line(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> tuple[float, float] | None:
        """The same price as (intercept, slope) of a straight line in the summed context, where
        the provider's price is one (None elsewhere): planned passes are then priced with one
        multiply-add each instead of a call (equal to ``decode_pricer`` to rounding)."""
        ...

    def decode_run_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[np.ndarray], np.ndarray] | None:
        """``decode_pricer`` over a run of passes at once (their summed contexts in, their
        prices out, equal to the bit), where the provider computes it with the scalar's
        operations in the scalar's order (None elsewhere): a long planned run then costs one
        vectorised call instead of a call per pass."""
        ...


def time_ms_pricer(
    perf: PerfModel, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
) -> Callable[[float], float]:
    """``decode_pricer`` for a provider with nothing worth binding: ``time_ms`` per pass."""
    time_ms = perf.time_ms
    return lambda ctx: time_ms(0, 0, 0.0, 0, decode_requests, ctx, tokens_per_step, ctx, kv_capacity_tokens)


class ScalarPassTimes:
    """Mixed into every provider: a :class:`BatchShape` is priced by the provider's ``time_ms``
    on its fields, in ``time_ms``'s one argument order (:func:`batch_args`)."""

    if TYPE_CHECKING:  # the provider's own

        def time_ms(
            self,
            prefill_tokens: float,
            prefill_requests: float,
            attention_pairs: float,
            prefill_context_tokens: float,
            decode_requests: float,
            decode_context_tokens: float,
            tokens_per_step: float = 1.0,
            active_kv_tokens: float = 0.0,
            kv_capacity_tokens: float = 0.0,
        ) -> float: ...

    def pass_time_ms(self, batch: BatchShape) -> float:
        if batch.group_tokens:
            return self.group_time_ms(batch_args(batch), batch.group_tokens, batch.busiest_rank_tokens)
        return self.time_ms(*batch_args(batch))

    def group_time_ms(
        self, pass_args: tuple[float, ...], group_tokens: float, busiest_rank_tokens: float
    ) -> float:
        del group_tokens, busiest_rank_tokens  # no attention-DP group priced
        return self.time_ms(*pass_args)

    def decode_line(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> tuple[float, float] | None:
        del decode_requests, tokens_per_step, kv_capacity_tokens
        return None  # no straight line known: priced through decode_pricer

    def decode_run_pricer(
        self, decode_requests: float, tokens_per_step: float, kv_capacity_tokens: float
    ) -> Callable[[np.ndarray], np.ndarray] | None:
        del decode_requests, tokens_per_step, kv_capacity_tokens
        return None  # no bit-equal vectorised price: priced pass by pass


class SpelledOutDecodeTimes(ScalarPassTimes):
    """Mixed into a provider whose decode passes have nothing worth binding (or, for the
    analytic model, not under MTP): ``decode_times_ms`` as ``pass_times_ms`` on the passes
    spelled out."""

    if TYPE_CHECKING:  # the provider's own

        def pass_times_ms(self, batches: BatchArrays) -> np.ndarray: ...

    def decode_times_ms(
        self,
        decode_requests: float,
        tokens_per_step: float,
        kv_capacity_tokens: float,
        context_tokens: np.ndarray,
    ) -> np.ndarray:
        decoders = np.empty(len(context_tokens))
        decoders.fill(decode_requests)
        return self.pass_times_ms(
            BatchArrays(
                decode_requests=decoders,
                decode_context_tokens=context_tokens,
                tokens_per_step=tokens_per_step,
                active_kv_tokens=context_tokens,
                kv_capacity_tokens=kv_capacity_tokens,
            )
        )


def batch_args(batch: BatchShape) -> tuple[float, ...]:
    """A batch as the positional arguments of ``PerfModel.time_ms``."""
    return (
        batch.prefill_tokens,
        batch.prefill_requests,
        batch.attention_pairs,
        batch.prefill_context_tokens,
        batch.decode_requests,
        batch.decode_context_tokens,
        batch.tokens_per_step,
        batch.active_kv_tokens,
        batch.kv_capacity_tokens,
    )
