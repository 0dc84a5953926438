"""Fleet waves (diagnosis/engine/fleet_waves.py, issue 55): the same class on machines of different jobs
that share a part of the fleet is one finding about the part, decided the same by one engine and by
job-stage members that each hold some of the jobs. The pure logic, on findings."""

from __future__ import annotations

import dataclasses

import pytest

from faultlens.diagnosis.engine.fleet_waves import FleetWaves, Seen, seen_of
from faultlens.diagnosis.engine.thresholds import ThresholdsError, WaveConfig, load
from faultlens.diagnosis.engine.waves import Waves, is_candidate, is_own_evidence
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.diagnosis_record import Diagnosis

WAVE = WaveConfig(window_s=60.0, min_nodes=8, min_share=0.25, classes=frozenset({"nic", "nvlink"}),
                  causes=(("nic", ("ib_switch", "rack")), ("default", ("rack",))),
                  fleet_min_jobs=2, fleet_min_nodes=4, fleet_min_share=0.5)
# Four jobs of four machines: a..d. Jobs a and b sit under switch sw0 (8 machines), c and d under sw1.
JOBS = {job: [f"{job}{i}" for i in range(4)] for job in "abcd"}
SWITCH = {"a": "sw0", "b": "sw0", "c": "sw1", "d": "sw1"}
MACHINES = {job: {n: {"ib_switch": SWITCH[job], "rack": f"r-{job}"} for n in nodes} for job, nodes in JOBS.items()}


def link_down(job: str, node: str, ts: float) -> Finding:
    return Finding(job=job, ts=ts, fault="nic", action="evict", nodes=(node,), entity="nic",
                   evidence=(f"e-{node}",), detail="link down")


def xid79(job: str, node: str, ts: float) -> Finding:
    return Finding(job=job, ts=ts, fault="gpu_lost", action="evict", nodes=(node,), entity="gpu",
                   evidence=(f"x-{node}",), detail="fallen off the bus")


def lanes(jobs, fleet: FleetWaves, machines=MACHINES) -> dict[str, Waves]:
    return {job: Waves(WAVE, job_size=lambda j: 4, machines=lambda j: machines[j], fleet=fleet, job=job) for job in jobs}


def fleet(config: WaveConfig = WAVE, machines=MACHINES) -> FleetWaves:
    return FleetWaves(config, lambda j: machines.get(j, {}), lambda: list(machines))


def run(by_job: dict[str, Waves], findings: list[Finding], until: float, index: FleetWaves | None = None):
    """Findings in event-time order, each job's lane ticked every second. ``index``: a member's
    fleet index also fed the findings of jobs it holds no lane for (the node stage's copies: wave
    candidates, and evidence of a machine's own, as the engine's _wave_copy reads them)."""
    passed, diags = [], []
    pending = sorted(findings, key=lambda f: f.ts)
    t = pending[0].ts
    while t <= until:
        while pending and pending[0].ts <= t:
            f = pending.pop(0)
            if f.job in by_job:
                passed += by_job[f.job].admit(f)
            elif index is not None and is_candidate(WAVE, f):
                index.note(f.fault, seen_of(f.ts, f.job, f.nodes[0], f.action, f.sympathetic, f.rule_id, f.evidence[0]))
            elif index is not None and is_own_evidence(f):
                index.note_own(Seen(f.ts, f.job, f.nodes[0]))
        for lane in by_job.values():
            released, out = lane.tick(t)
            passed += released
            diags += out
        t += 1.0
    return passed, list({d.id: d for d in diags}.values())


def switch_reboot(jobs="ab", t0=100.0) -> list[Finding]:
    return [link_down(job, n, t0 + 2 * i + 0.5 * k) for k, job in enumerate(jobs) for i, n in enumerate(JOBS[job])]


def test_two_small_jobs_under_one_switch_are_one_finding_naming_it_and_nobody_is_judged_alone():
    index = fleet()
    passed, diags = run(lanes("abcd", index), switch_reboot("ab"), until=400)
    assert passed == []
    [d] = diags
    assert (d.job, d.fault, d.action, d.nodes, d.group, d.count) == ("a", "nic", "alert", (), "wave:ib_switch=sw0", 8)
    assert "8 of the 8 machines under ib_switch=sw0, in 2 jobs (a b)" in d.detail and d.rule == "nic"


def test_members_that_each_hold_one_job_write_the_same_one_finding_each_under_its_own_job():
    alone = fleet()
    _, whole = run(lanes("ab", alone), switch_reboot("ab"), until=400)
    [wave] = whole
    assert alone.delivered_under(wave, lambda job: True) == ("a", "b")  # one engine holding both: under each
    for mine in ("a", "b"):  # a job-stage member with job `mine`; the other job's candidates as copies
        index = fleet()
        passed, diags = run(lanes(mine, index), switch_reboot("ab"), until=400, index=index)
        assert passed == []  # neither member judges a machine of the wave alone
        # the same finding, id and all, written by each member under the job it holds
        assert diags == whole and index.delivered_under(wave, {mine}.__contains__) == (mine,)
    other = Diagnosis(job="a", ts=1.0, onset=1.0, fault="nic", action="evict", nodes=("a0",))
    assert alone.delivered_under(other, lambda job: True) == ("a",)


def test_a_member_holding_only_a_small_job_of_the_part_hears_the_wave_under_it():
    """Job e has two machines under sw0, one of which went down with the switch: the member that
    holds only e writes the finding under e, so e's remediation pauses nic for its machines there."""
    machines = {**MACHINES, "e": {f"e{i}": {"ib_switch": "sw0", "rack": "r-e"} for i in range(2)}}
    index = fleet(machines=machines)
    passed, diags = run(lanes("e", index, machines), switch_reboot("ab") + [link_down("e", "e0", 90.0)], until=400,
                        index=index)
    # e0's own link-down 10 s before the switch's went is one of the wave's; e hears it
    assert [d.group for d in diags] == ["wave:ib_switch=sw0"] and passed == []
    assert index.delivered_under(diags[0], lambda job: job == "e") == ("e",)
    assert fleet(machines=machines).delivered_under(diags[0], lambda job: True) == (diags[0].job,)  # never seen: its own


def test_the_detail_names_every_machine_and_those_judged_alone_on_their_own_evidence_alike_on_every_member():
    # three jobs of four under one switch: 12 machines, more than a detail used to show
    machines = {job: {f"{job}{i}": {"ib_switch": "big", "rack": f"r-{job}"} for i in range(4)} for job in "xyz"}
    findings = [link_down(job, f"{job}{i}", 100.0 + 2 * i + 0.5 * k) for k, job in enumerate("xyz") for i in range(4)]
    findings.append(xid79("y", "y2", 103.0))
    details = set()
    for held in ("xyz", "x", "y", "z"):
        index = fleet(machines=machines)
        passed, diags = run(lanes(held, index, machines), findings, until=400, index=index if len(held) == 1 else None)
        [d] = diags
        assert [f.fault for f in passed] == (["gpu_lost"] if "y" in held else [])  # judged alone, by y's member
        details.add(d.detail)
    [detail] = details
    assert " ".join(f"{j}{i}" for j in "xyz" for i in range(4)) in detail and "(+" not in detail
    assert detail.endswith("judged alone on evidence of their own: y2")


def test_machines_under_different_switches_or_too_few_of_the_switch_are_judged_alone():
    # one job under sw0 and one under sw1: no part shared by two jobs
    passed, diags = run(lanes("ac", fleet()), switch_reboot("ac"), until=400)
    assert diags == [] and len(passed) == 8
    # two machines of each job under sw0: 4 of its 8 machines is not over half ... at 0.6
    few = [f for f in switch_reboot("ab") if f.nodes[0][-1] in "01"]
    passed, diags = run(lanes("ab", fleet(dataclasses.replace(WAVE, fleet_min_share=0.6))), few, until=400)
    assert diags == [] and len(passed) == 4
    # turned off: every machine judged alone (each job has 4, under its own wave's 8)
    passed, diags = run(lanes("ab", fleet(dataclasses.replace(WAVE, fleet_min_jobs=0))), switch_reboot("ab"), until=400)
    assert diags == [] and len(passed) == 8


def test_a_fleet_wave_is_data(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text("[wave.fleet]\nmin_jobs = 3\nmin_share = 0.75\n")
    wave = load([f]).wave
    assert (wave.fleet_min_jobs, wave.fleet_min_nodes, wave.fleet_min_share) == (3, 4, 0.75)
    f.write_text("[wave.fleet]\nmin_machines = 3\n")
    with pytest.raises(ThresholdsError, match="wave.fleet"):
        load([f])


def test_a_member_holding_only_a_job_of_the_part_with_no_machine_in_the_wave_still_hears_it():
    """Job e has two machines under sw0, neither of which went down with the switch. The member
    that holds only e has no candidate of its own to be due: it forms the wave from its index (the
    other members' copies) and writes it under e, as the members holding a and b do under theirs,
    so e's remediation pauses nic for its machines under the switch that is rebooting."""
    machines = {**MACHINES, "e": {f"e{i}": {"ib_switch": "sw0", "rack": "r-e"} for i in range(2)}}
    _, whole = run(lanes("abe", fleet(machines=machines), machines), switch_reboot("ab"), until=400)
    [wave] = whole
    assert wave.group == "wave:ib_switch=sw0" and "8 of the 10 machines" in wave.detail
    index = fleet(machines=machines)
    passed, diags = run(lanes("e", index, machines), switch_reboot("ab"), until=400, index=index)
    assert passed == [] and diags == whole
    assert index.delivered_under(wave, lambda job: job == "e") == ("e",)
    # a member holding only c (under sw1) hears nothing of it
    index = fleet(machines=machines)
    assert run(lanes("c", index, machines), switch_reboot("ab"), until=400, index=index) == ([], [])
