"""One settle order per instant: the declared phases, and a heap that pops in the same order."""

from __future__ import annotations

from aisimulate.replay import DeploymentPlan, EngineSpec
from aisimulate.replay.simulation import SETTLE_ORDER, Simulation, settle_phases
from aisimulate.replay.workers import resolve_engine
from aisimulate.workload import SyntheticWorkload

EVENTS = [name for name, event in SETTLE_ORDER if event]


class Recording(Simulation):
    """A simulation whose phases only record that they ran (and, for one test, add work)."""

    def record(self, name: str, now: float) -> None:
        self.seen.append((name, now))
        hook = self.hooks.get(name)
        if hook is not None:
            hook(self, now)


def recorder(name: str, event: bool):
    if event:
        return lambda self, payload, now: self.record(name, now)
    return lambda self, now: self.record(name, now)


for _name, _event in SETTLE_ORDER:
    setattr(Recording, f"_on_{_name}" if _event else f"_settle_{_name}", recorder(_name, _event))


def recording(**hooks) -> Recording:
    plan = DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", agg=EngineSpec())
    engines = {"agg": resolve_engine(plan, plan.agg, perf="analytic", perf_table=None, where="agg")}
    sim = Recording(
        plan,
        SyntheticWorkload(isl=64, osl=4, num_requests=1, request_rate=1.0),
        engines=engines,
        seed=0,
        exact=False,
        capture_timeline=False,
        timeline_interval_ms=1000.0,
        max_sim_time_ms=None,
    )
    sim.seen, sim.hooks = [], hooks
    return sim


def kind(name: str) -> int:
    return [n for n, _ in SETTLE_ORDER].index(name)


def test_every_phase_has_one_handler_and_the_heap_agrees_with_the_order():
    phases = settle_phases(Simulation)
    assert [k for k, _, _ in phases] == sorted(k for k, _, _ in phases)
    assert [fn.__name__ for _, _, fn in phases] == [
        f"_on_{n}" if e else f"_settle_{n}" for n, e in SETTLE_ORDER
    ]


def test_every_event_kind_at_one_instant_settles_in_the_declared_order():
    sim = recording()
    for name in reversed(EVENTS):  # pushed last-phase first: the order is not the push order
        sim._push(5.0, kind(name), None)
    sim._drain(5.0)
    assert [name for name, _ in sim.seen] == [name for name, _ in SETTLE_ORDER]
    assert {now for _, now in sim.seen} == {5.0}
    assert not sim.heap


def test_a_later_phase_creating_earlier_work_at_the_instant_settles_it_before_any_pass_starts():
    # The ready phase queues a transfer for now: the settling goes back to the transfer phase,
    # then on through the steps after it, once each, before the instant is left.
    def transfer_now(sim: Recording, now: float) -> None:
        if sum(1 for n, _ in sim.seen if n == "ready") == 1:
            sim._push(now, kind("transfer"), None)

    sim = recording(ready=transfer_now)
    for name in ("ready", "tick"):
        sim._push(2.0, kind(name), None)
    sim._push(3.0, kind("pass_end"), None)  # a later instant stays in the heap
    sim._drain(2.0)
    assert [name for name, _ in sim.seen] == ["held", "ready", "transfer", "arrivals", "tick"]
    assert [k for _, k, _, _ in sim.heap] == [kind("pass_end")]
