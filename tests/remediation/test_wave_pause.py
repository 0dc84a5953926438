"""A wave pauses remediation of its class for its job (remediation/wave_pause.py, issue 55)."""

import dataclasses

from faultlens.events.diagnosis_record import Diagnosis
from tests.remediation.test_policy import evict, policy


def wave(ts=1000.0, fault="nvlink", cause="nvlink_domain=nvl-0"):
    return Diagnosis(job="j", ts=ts, onset=ts - 60, fault=fault, action="alert", group=f"wave:{cause}", count=32)


def test_a_straggler_of_the_wave_is_recorded_not_evicted():
    p = policy()
    decision, cmd = p.decide(wave(), 1000.0)
    assert cmd is None and not decision.sent  # the wave itself asks a person
    decision, cmd = p.decide(evict("n001", ts=1100.0, fault="nvlink"), 1100.0)
    assert cmd is None and decision.rung == "wave" and "paused" in decision.reason and "nvl-0" in decision.reason


def test_evidence_of_its_own_and_other_jobs_or_later_faults_are_not_paused():
    p = policy()
    p.decide(wave(), 1000.0)
    assert p.decide(evict("n001", ts=1010.0, fault="gpu_lost"), 1010.0)[1] is not None  # an Xid 79
    assert p.decide(evict("n002", ts=1000.0 + 700, fault="nvlink"), 1700.0)[1] is not None  # 700 s after: its own


def test_a_wave_naming_a_part_pauses_its_class_for_another_jobs_machine_in_that_part():
    from faultlens.events.topology import Topology

    p = policy()
    machines = {n: {"ib_switch": "sw-0" if n in ("k0", "k1") else "sw-1"} for n in ("k0", "k1", "k2", "k3")}
    grid = Topology.grid(["k0", "k1", "k2", "k3"], 1, 1, 1, 4)
    p.observe_topology("k", Topology(grid.tp, grid.pp, grid.dp, grid.ranks, {"machines": machines}))
    p.config = dataclasses.replace(p.config, act_on=frozenset({"j", "k"}))
    p.decide(wave(fault="nic", cause="ib_switch=sw-0"), 1000.0)  # a fleet wave written under job j

    def other(node):
        return Diagnosis(job="k", ts=1100.0, onset=1100.0, fault="nic", action="evict", nodes=(node,), confidence=0.95)

    decision, cmd = p.decide(other("k1"), 1100.0)
    assert cmd is None and decision.rung == "wave" and "under ib_switch=sw-0" in decision.reason
    assert p.decide(other("k2"), 1100.0)[1] is not None  # under another switch: judged as always


def test_a_wave_heard_under_another_job_pauses_that_jobs_machines_in_its_part_and_decides_nothing():
    """Two remediation members split `diagnoses` by job: the fleet wave written under job j reaches
    the member of job k under k's key (diagnosis/engine/fleet_waves.py). That member remembers it,
    records no decision for j's finding (j's member does), and pauses nic for k's machines under the
    switch; a record keyed by its own job, or one that is no wave, is decided as always."""
    from faultlens.events.topology import Topology
    from faultlens.remediation.consumer import DIAGNOSES_TOPIC, RemediationHandler
    from faultlens.streams.runner.types import Record

    p = policy()
    machines = {n: {"ib_switch": "sw-0" if n in ("k0", "k1") else "sw-1"} for n in ("k0", "k1", "k2", "k3")}
    grid = Topology.grid(["k0", "k1", "k2", "k3"], 1, 1, 1, 4)
    p.observe_topology("k", Topology(grid.tp, grid.pp, grid.dp, grid.ranks, {"machines": machines}))
    p.config = dataclasses.replace(p.config, act_on=frozenset({"j", "k"}))
    handler = RemediationHandler(p, clock=lambda: 1100.0)

    def record(d, key):
        return Record(DIAGNOSES_TOPIC, 0, 0, key.encode(), d, 0)

    def other(node):
        return Diagnosis(job="k", ts=1100.0, onset=1100.0, fault="nic", action="evict", nodes=(node,), confidence=0.95)

    handler.handle([record(wave(fault="nic", cause="ib_switch=sw-0"), "k")])
    assert handler.decisions == []  # heard, not decided: job j's member decides its own finding
    out = handler.handle([record(other("k1"), "k"), record(other("k2"), "k")])
    [paused, evicted] = handler.decisions
    assert (paused.rung, paused.sent, evicted.sent) == ("wave", False, True) and "under ib_switch=sw-0" in paused.reason
    assert len(out) == 1  # k2's evict command, under another switch
    assert not p.hear_wave(other("k3"))  # not a wave: a key that differs changes nothing for it
