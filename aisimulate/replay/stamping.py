"""When a request's tokens reach the client: its first token, its second, and the gaps between.

The rules, the same on every path that emits tokens (a prompt completing, a decoder stepped on
its own, the decoders a rank's ledger keeps in aggregate, a run of planned passes booked):

* a request's first token ends its TTFT; every later token closes a gap since the request's
  previous one, and the tokens of a speculative burst after its first come out with it (gaps of
  zero);
* the second token (TTST) is the one that takes a request from fewer than two tokens to two or
  more: a decoder's first decode step, or where that step emits one token, the next;
* under asynchronous scheduling a first token computed by a prompt's last pass reaches the
  client ``lag_passes`` passes (of that pass's duration) after the pass ends;
* the ledger's decoders are stamped without being visited: one gap per decoder per pass since
  the previous pass end, except the ones that had no decode pass yet (the rank's ``fresh``
  list), whose previous token came out at a time of their own. Their own fields (second token,
  last token) are derived when they leave the aggregates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from array import array

    from aisimulate.replay.ledger import Ledger
    from aisimulate.replay.metrics import Collector
    from aisimulate.replay.request import Request


def token_out(r: Request, end_ms: float, collector: Collector) -> None:
    """A token of r out at ``end_ms``: its first, or a gap since its last (r's own fields are
    left to the caller: a ledger decoder's are derived later)."""
    if r.generated == 0:
        r.first_token_ms = end_ms
        collector.emitted_tokens += 1
    else:
        last = r.last_token_ms
        assert last is not None  # set with its first token
        collector.gap(end_ms - last, 1)


def stamp(r: Request, end_ms: float, tokens: int, collector: Collector) -> None:
    """r, visited, emitted ``tokens`` at ``end_ms`` (a burst's tokens share the pass end)."""
    token_out(r, end_ms, collector)
    if tokens > 1:
        collector.gap(0.0, tokens - 1)
    if r.generated < 2 <= r.generated + tokens:
        r.second_token_ms = end_ms
    r.generated += tokens
    r.last_token_ms = end_ms


def prompt_token(r: Request, end_ms: float, collector: Collector, lag_passes: float, pass_ms: float) -> bool:
    """r's prompt was computed by a pass of ``pass_ms`` ending at ``end_ms``: the token it
    emits. Returns whether that is r's first (a request preempted after its first token
    recomputes its prompt and emits its next one)."""
    first = r.generated == 0
    stamp(r, end_ms, 1, collector)
    if first and lag_passes:
        r.first_token_ms = end_ms + lag_passes * pass_ms
    return first


def pass_gaps(fresh: list[Request], decoders: int, pass_end_ms: array[float], collector: Collector) -> None:
    """The token gaps of a ledger's ``decoders`` decoding in the pass that ended last (the
    latest of ``pass_end_ms``); ``fresh``, the ones among them that had no decode pass before
    it, is emptied."""
    end_ms = pass_end_ms[-1]
    for r in fresh:
        token_out(r, end_ms, collector)
    rest = decoders - len(fresh)
    if rest:
        collector.gap(end_ms - pass_end_ms[-2], rest)
    fresh.clear()


def burst_steps(steps: int, tokens: int, collector: Collector) -> None:
    """A ledger's decoders took ``steps`` speculative steps that emitted ``tokens``: each burst's
    tokens beyond its first share its pass end."""
    if tokens > steps:
        collector.gap(0.0, tokens - steps)
    collector.decode_step(tokens, steps)


def second_token_pass(r: Request, ledger: Ledger) -> int | None:
    """The pass in which ledger decoder r's second token came out, by :func:`stamp`'s rule; None
    if it had two tokens before it started decoding."""
    if r.dec_gen0 > 1:
        return None
    return r.dec_pass0 + (r.dec_gen0 + ledger.done(r, 1) < 2)
