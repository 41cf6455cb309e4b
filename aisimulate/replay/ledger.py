"""What a rank's decoding requests will emit and take, pass by pass, without visiting them.

From the pass it starts decoding until it finishes, a fast-path decoder's future is fixed: the
tokens each of its steps emits (one, or a speculative burst drawn when it starts) and so the
blocks each step takes. A ledger keeps the sum of those futures over the rank's decoders, so that
a pass, or a stretch of passes, reads the batch's totals in time independent of the batch size.
Requests in the ledger are registered by :meth:`start` and leave by :meth:`stop` (preempted,
before pass ``p``) or :meth:`finish` (their last step was pass ``p``). :class:`Ledger` declares
the interface; :class:`OneTokenLedger` and :class:`BurstLedger` implement it.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from aisimulate.replay.scheduler import ceil_div

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aisimulate.replay.request import Request


@runtime_checkable
class Ledger(Protocol):
    """What the rank's decoders emit and take on every pass ahead, as totals over them."""

    block_size: int

    def start(self, r: Request, pass0: int) -> int:
        """Register r decoding from ``pass0``; return how many steps it takes to finish."""
        ...

    def stop(self, r: Request, p: int) -> None:
        """Take r out before pass ``p`` (preempted): its steps from ``p`` on are not taken."""
        ...

    def finish(self, r: Request, p: int) -> None:
        """Take r out after its last step, at pass ``p``."""
        ...

    def done(self, r: Request, steps: int) -> int:
        """Tokens r emitted in its first ``steps`` steps."""
        ...

    def own_blocks(self, r: Request, p: int) -> int:
        """Blocks r's step at pass ``p`` takes."""
        ...

    def blocks(self, p: int) -> int:
        """Blocks the decoders' steps at pass ``p`` take."""
        ...

    def tokens(self, p: int) -> int:
        """Tokens the decoders' steps at pass ``p`` emit."""
        ...

    def tokens_over(self, p: int, passes: int) -> int:
        """Tokens the decoders emit over ``passes`` passes from ``p``."""
        ...

    def contexts(self, context_tokens: int, p: int, passes: int, decoders: int) -> Sequence[int]:
        """The batch's summed context after each of the ``passes`` passes from ``p``, from
        ``context_tokens`` before them, when ``decoders`` of the registered ones still step in
        them (the others finished in an earlier pass)."""
        ...

    def blocks_over(self, p: int, passes: int) -> int:
        """Blocks the decoders take over ``passes`` passes from ``p``."""
        ...

    def passes_with_blocks(self, p: int, passes: int, available: int) -> int:
        """How many of the ``passes`` passes from ``p`` find their blocks in ``available``."""
        ...

    def outputs_left(self, p: int) -> int:
        """Output tokens the decoders have left at the start of pass ``p``."""
        ...


class BurstSampler:
    """Speculative bursts: a step emits one token, plus each draft accepted before the first
    rejection (position ``i`` is accepted with ``accept_rates[i]`` given the ones before it)."""

    # Steps drawn at a time: a request takes its steps from the stock, which saves the
    # per-request numpy calls that dominate small draws.
    STOCK_STEPS = 1 << 16

    def __init__(self, accept_rates: list[float], rng: np.random.Generator) -> None:
        self.rng = rng
        # P(a step emits more than j tokens), ascending: one uniform per step picks its burst.
        survival = np.cumprod(accept_rates)
        self._survival = np.sort(survival)
        self._most = len(accept_rates) + 1
        self._mean_tokens = 1.0 + float(survival.sum())
        self._stock = np.empty(0, dtype=np.int64)
        self._next = 0

    def _steps(self, n: int) -> np.ndarray:
        """The tokens of the next ``n`` steps off the stock (a view)."""
        if self._next + n > len(self._stock):
            fresh = self.rng.random(max(n, self.STOCK_STEPS))
            self._stock = self._most - self._survival.searchsorted(fresh, side="right")
            self._next = 0
        steps = self._stock[self._next : self._next + n]
        self._next += n
        return steps

    def draw(self, remaining: int, *, first_single: bool) -> np.ndarray:
        """Tokens out after each step until ``remaining`` are (the last step cut to what is
        left). ``first_single``: the first step emits one token (a prompt whose KV arrived from
        a prefill worker joins with a plain step)."""
        # Enough steps for all but a vanishing share of draws (those are drawn again, at the
        # most steps there can be): taking every possible step would double the work.
        steps = min(remaining, int(remaining / self._mean_tokens + 4.0 * math.sqrt(remaining)) + 8)
        while True:
            tokens = self._steps(steps)
            done = np.cumsum(tokens)
            if first_single:
                done -= tokens[0] - 1
            if done[-1] >= remaining:
                break
            steps = remaining
        done = done[: int(done.searchsorted(remaining)) + 1]
        done[-1] = remaining
        return done


def per_step(done: np.ndarray) -> np.ndarray:
    """Tokens of each step, from the tokens out after each."""
    steps = done.copy()
    np.subtract(done[1:], done[:-1], out=steps[1:])
    return steps


class OneTokenLedger:
    """Every step emits one token. A decoder computing token ``nc0 + k`` at pass ``pass0 + k``
    takes a block on the passes congruent to ``pass0 - nc0`` modulo the block size, so a count per
    residue class is the whole ledger."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.residue = [0] * block_size
        self.decoders = 0
        # Sum over decoders of (max_output - dec_gen0 + dec_pass0): their outputs left sum to
        # this minus decoders x pass.
        self._output_base = 0

    def start(self, r: Request, pass0: int) -> int:
        """Register r decoding from ``pass0``; return how many steps it takes to finish."""
        self.residue[(pass0 - r.num_computed) % self.block_size] += 1
        self.decoders += 1
        self._output_base += r.max_output - r.generated + pass0
        return r.max_output - r.generated

    def stop(self, r: Request, p: int) -> None:
        self.finish(r, p)

    def finish(self, r: Request, p: int) -> None:
        self.residue[(r.dec_pass0 - r.dec_nc0) % self.block_size] -= 1
        self.decoders -= 1
        self._output_base -= r.max_output - r.dec_gen0 + r.dec_pass0

    def done(self, r: Request, steps: int) -> int:
        """Tokens r emitted in its first ``steps`` steps."""
        return steps

    def own_blocks(self, r: Request, p: int) -> int:
        """Blocks r's step at pass ``p`` takes."""
        return int((r.dec_pass0 - r.dec_nc0 - p) % self.block_size == 0)

    def blocks(self, p: int) -> int:
        """Blocks the decoders' steps at pass ``p`` take."""
        return self.residue[p % self.block_size]

    def tokens(self, p: int) -> int:
        """Tokens the decoders' steps at pass ``p`` emit."""
        return self.decoders

    def tokens_over(self, p: int, passes: int) -> int:
        return self.decoders * passes

    def contexts(self, context_tokens: int, p: int, passes: int, decoders: int) -> Sequence[int]:
        """One token per decoder stepping: ``decoders`` more at each of the passes."""
        if not decoders:
            return [context_tokens] * passes
        return range(context_tokens + decoders, context_tokens + decoders * passes + 1, decoders)

    def blocks_over(self, p: int, passes: int) -> int:
        """Blocks the decoders take over ``passes`` passes from ``p``."""
        bs = self.block_size
        cycles, rest = divmod(passes, bs)
        residue, start = self.residue, p % bs
        # Over a whole cycle of block_size passes every decoder takes exactly one block; the
        # rest take the blocks of the residue classes from the current pass on, wrapping around.
        wrapped = start + rest - bs
        tail = sum(residue[:wrapped]) if wrapped > 0 else 0
        return cycles * self.decoders + sum(residue[start : start + rest]) + tail

    def passes_with_blocks(self, p: int, passes: int, available: int) -> int:
        """How many of the ``passes`` passes from ``p`` find their blocks in ``available``."""
        d, bs, residue = self.decoders, self.block_size, self.residue
        if d * (passes // bs + 1) <= available:
            return passes  # room for all, however the residue classes fall
        # Every block_size consecutive passes take one block per decoder, whatever the offset.
        cycles = min(available // d, passes // bs)
        taken, k = cycles * d, cycles * bs
        while k < passes:
            taken += residue[(p + k) % bs]
            if taken > available:
                break
            k += 1
        return k

    def outputs_left(self, p: int) -> int:
        """Output tokens the decoders have left at the start of pass ``p``."""
        return self._output_base - self.decoders * p


class BurstLedger:
    """Steps emit speculative bursts, drawn when a decoder starts (``Request.bursts``): its
    per-step tokens and blocks are added into per-pass totals (arrays over the passes ahead)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.base = 0  # the pass of element 0
        self._tokens = np.zeros(1024, dtype=np.int64)
        self._blocks = np.zeros(1024, dtype=np.int64)

    def start(self, r: Request, pass0: int) -> int:
        assert r.bursts is not None
        self._add(pass0, per_step(r.bursts), self._step_blocks(r), 1)
        return len(r.bursts)

    def stop(self, r: Request, p: int) -> None:
        assert r.bursts is not None
        k = p - r.dec_pass0
        self._add(p, per_step(r.bursts)[k:], self._step_blocks(r)[k:], -1)

    def finish(self, r: Request, p: int) -> None:
        pass  # its steps all lie in the past

    def done(self, r: Request, steps: int) -> int:
        assert r.bursts is not None
        return int(r.bursts[steps - 1]) if steps > 0 else 0

    def own_blocks(self, r: Request, p: int) -> int:
        assert r.bursts is not None
        k, bs = p - r.dec_pass0, self.block_size
        before = int(r.bursts[k - 1]) if k else 0
        return ceil_div(r.dec_nc0 + int(r.bursts[k]), bs) - ceil_div(r.dec_nc0 + before, bs)

    def _step_blocks(self, r: Request) -> np.ndarray:
        """Blocks each of r's steps takes: KV for its whole burst."""
        assert r.bursts is not None
        bs = self.block_size
        held = r.bursts + (r.dec_nc0 + bs - 1)
        held //= bs  # blocks held after each step
        blocks = per_step(held)
        blocks[0] -= ceil_div(r.dec_nc0, bs)
        return blocks

    def blocks(self, p: int) -> int:
        i = p - self.base
        return int(self._blocks[i]) if i < len(self._blocks) else 0

    def tokens(self, p: int) -> int:
        i = p - self.base
        return int(self._tokens[i]) if i < len(self._tokens) else 0

    def tokens_over(self, p: int, passes: int) -> int:
        i = p - self.base
        return int(self._tokens[i : i + passes].sum())

    def contexts(self, context_tokens: int, p: int, passes: int, decoders: int) -> Sequence[int]:
        del decoders  # a finished decoder's bursts end with its last step: the totals know
        i = p - self.base
        steps: list[int] = self._tokens[i : i + passes].tolist()
        after = list(accumulate(steps, initial=context_tokens))
        del after[0]
        return after

    def blocks_over(self, p: int, passes: int) -> int:
        i = p - self.base
        return int(self._blocks[i : i + passes].sum())

    def passes_with_blocks(self, p: int, passes: int, available: int) -> int:
        i = p - self.base
        taken = np.cumsum(self._blocks[i : i + passes])
        return int(np.searchsorted(taken, available, side="right"))

    def outputs_left(self, p: int) -> int:
        return int(self._tokens[p - self.base :].sum())

    def _add(self, p: int, tokens: np.ndarray, blocks: np.ndarray, sign: int) -> None:
        """Add (sign 1) or take back (-1) a decoder's steps from pass ``p`` on."""
        if p - self.base > len(self._tokens) // 2:  # drop the passes behind us
            shift = p - self.base
            self._tokens = self._tokens[shift:].copy()
            self._blocks = self._blocks[shift:].copy()
            self.base = p
        i = p - self.base
        end = i + len(tokens)
        if end > len(self._tokens):
            grow = max(end, 2 * len(self._tokens)) - len(self._tokens)
            self._tokens = np.concatenate([self._tokens, np.zeros(grow, dtype=np.int64)])
            self._blocks = np.concatenate([self._blocks, np.zeros(grow, dtype=np.int64)])
        if sign > 0:
            self._tokens[i:end] += tokens
            self._blocks[i:end] += blocks
        else:
            self._tokens[i:end] -= tokens
            self._blocks[i:end] -= blocks
