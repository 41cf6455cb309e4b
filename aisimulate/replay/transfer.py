"""The prefill -> decode KV transfer of disaggregated serving: how long one prompt's hand-off takes.

A hand-off costs a fixed latency plus the prompt's KV bytes over the link. The latency is what a
transfer costs apart from its bytes: the request's extra hops on Dynamo's disaggregated path
(the prefill result back through the router to the decode worker), the transfer's setup
(NIXL/UCX metadata exchange and block descriptors) and the decode scheduler noticing that the
KV has landed. On the measured disaggregated runs it, not the bytes, is most of the hand-off: a
1,024-token DeepSeek prompt moves in well under a millisecond over NVLink, while the measured
TTFT at a few users lies 50-260 ms above the replayed prefill and first decode step
(docs/fidelity.md, "Disaggregated TTFT").

A backend whose context ranks send one prompt's KV at a time (TensorRT-LLM's cache transceiver by
default) also queues its sends: each takes the backend's fixed send cost plus its bytes at the
sender's rate, after the sends its rank started before it. Prompts that leave one context pass
together then reach their decode workers one after another (docs/fidelity.md, "TRT-LLM
disaggregated: one KV send at a time").
"""

from __future__ import annotations

from dataclasses import dataclass

from aisimulate.catalog import get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.replay.plan import DeploymentPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class KvTransfer:
    """One deployment's hand-off: ``latency_ms`` per transfer, then the send: ``send_ms`` and the
    bytes at ``gbps`` (GB/s per GPU; 0: the bytes are free). ``serial``: a sending rank sends one
    prompt's KV at a time."""

    latency_ms: float
    gbps: float
    send_ms: float = 0.0
    serial: bool = False

    def send_time_ms(self, sent_bytes: float) -> float:
        """How long one send occupies its rank's sender."""
        wire_ms = sent_bytes / (self.gbps * 1e6) if self.gbps else 0.0  # GB/s = 1e6 bytes per ms
        return self.send_ms + wire_ms

    def ms(self, sent_bytes: float) -> float:
        """Time from a prompt's last prefill pass to its KV on the decode worker, queueing aside."""
        return self.latency_ms + self.send_time_ms(sent_bytes)


FREE = KvTransfer(latency_ms=0.0, gbps=0.0)


class KvSenders:
    """The senders of one replay's context ranks: when each is free again. Without ``serial``
    sends never wait for each other."""

    __slots__ = ("free_at_ms", "transfer")

    def __init__(self, transfer: KvTransfer) -> None:
        self.transfer = transfer
        self.free_at_ms: dict[int, float] = {}

    def ms(self, now_ms: float, sent_bytes: float, source: int) -> float:
        """Time from ``now_ms`` (the prompt's last prefill pass) to its KV on the decode worker,
        sent by rank ``source`` (any key naming the sending rank) after the request's hops."""
        transfer = self.transfer
        if not transfer.serial:
            return transfer.ms(sent_bytes)
        start_ms = max(now_ms + transfer.latency_ms, self.free_at_ms.get(source, 0.0))
        done_ms = start_ms + transfer.send_time_ms(sent_bytes)
        self.free_at_ms[source] = done_ms
        return done_ms - now_ms


def transfer_bandwidth(plan: DeploymentPlan) -> float:
    """GB/s of the prefill -> decode KV transfer: pinned, or NVLink when one worker of each role
    fits one NVLink domain, else the inter-node link."""
    if plan.kv_transfer_bandwidth_gbps is not None:
        return plan.kv_transfer_bandwidth_gbps
    assert plan.prefill is not None and plan.decode is not None
    system = get_system(plan.system, where="deployment.system")
    if plan.prefill.gpus_per_worker + plan.decode.gpus_per_worker <= system.nvlink_domain:
        return system.nvlink_gbps
    return system.inter_node_gbps


def transfer_latency_ms(plan: DeploymentPlan) -> float:
    """The plan's per-transfer latency; where it sets none, its backend's fitted hand-off
    latency, unless the plan pins the bandwidth to 0 (a free transfer, the reference's default)."""
    if plan.kv_transfer_latency_ms is not None:
        return plan.kv_transfer_latency_ms
    if plan.kv_transfer_bandwidth_gbps == 0:
        return 0.0
    return backend_profile(plan.backend, where="deployment.backend").kv_handoff_ms


def kv_transfer(plan: DeploymentPlan) -> KvTransfer:
    """The hand-off of a disaggregated plan (an aggregated one hands nothing off). Over the
    system's own links a backend's sender may be slower than the link (``kv_send_gbps``); a plan
    that pins the bandwidth names the rate itself, and a free transfer (0) neither costs nor
    queues."""
    if plan.mode != "disagg":
        return FREE
    profile = backend_profile(plan.backend, where="deployment.backend")
    gbps = transfer_bandwidth(plan)
    if plan.kv_transfer_bandwidth_gbps is None and profile.kv_send_gbps is not None:
        gbps = min(gbps, profile.kv_send_gbps)
    sends = plan.kv_transfer_bandwidth_gbps != 0
    return KvTransfer(
        latency_ms=transfer_latency_ms(plan),
        gbps=gbps,
        send_ms=profile.kv_send_ms if sends else 0.0,
        serial=profile.serial_kv_send and sends,
    )
