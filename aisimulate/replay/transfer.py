"""The prefill -> decode KV transfer of disaggregated serving: how long one prompt's hand-off takes.

A hand-off costs a fixed latency plus the prompt's KV bytes over the link. The latency is what a
transfer costs apart from its bytes: the request's extra hops on Dynamo's disaggregated path
(the prefill result back through the router to the decode worker), the transfer's setup
(NIXL/UCX metadata exchange and block descriptors) and the decode scheduler noticing that the
KV has landed. On the measured disaggregated runs it, not the bytes, is most of the hand-off: a
1,024-token DeepSeek prompt moves in well under a millisecond over NVLink, while the measured
TTFT at a few users lies 50-260 ms above the replayed prefill and first decode step
(docs/fidelity.md, "Disaggregated TTFT").
"""

from __future__ import annotations

from dataclasses import dataclass

from aisimulate.catalog import get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.replay.plan import DeploymentPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class KvTransfer:
    """One deployment's hand-off: ``latency_ms`` per transfer, then ``gbps`` (GB/s per GPU; 0:
    the bytes are free)."""

    latency_ms: float
    gbps: float

    def ms(self, sent_bytes: float) -> float:
        """Time from a prompt's last prefill pass to its KV on the decode worker."""
        wire_ms = sent_bytes / (self.gbps * 1e6) if self.gbps else 0.0  # GB/s = 1e6 bytes per ms
        return self.latency_ms + wire_ms


FREE = KvTransfer(latency_ms=0.0, gbps=0.0)


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
    """The hand-off of a disaggregated plan (an aggregated one hands nothing off)."""
    if plan.mode != "disagg":
        return FREE
    return KvTransfer(latency_ms=transfer_latency_ms(plan), gbps=transfer_bandwidth(plan))
