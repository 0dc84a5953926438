"""The demo's simulated launcher answers a dual-phase reproduction as trainer_hooks.reproduction does
(faultlens.demo.reproductions): the ladder then convicts the machine of the fault, or asks a person."""

from __future__ import annotations

from faultlens.demo.reproductions import is_reproduction, run_simulated_reproduction
from faultlens.events.command import Command
from faultlens.events.payloads import check_payload
from faultlens.remediation.ladder import dual_phase_plan
from faultlens.remediation.reproduction import PendingReproduction, judge_reproduction
from faultlens.simulator import FaultPlan, SimConfig, SimulatedCluster

CFG = SimConfig(nodes=9, gpus=1, seed=2)


def _reproduction(cluster: SimulatedCluster) -> tuple[Command, PendingReproduction]:
    plan = dual_phase_plan(cluster.slots)
    now = cluster.now
    cmd = Command(job=cluster.cfg.job, action="restart", issued_at=now, expires_at=now + 60, reason="test",
                  diagnosis_id="d1", params={"mode": "dual_phase_replay", "plan": plan.to_dict()})
    return cmd, PendingReproduction(cluster.cfg.job, cmd.id, {"fault": "kernel"}, plan, now, now + 3600)


def _outcome(cluster: SimulatedCluster, cmd: Command):
    run_simulated_reproduction(cluster, cmd)
    events = [e for e in cluster.advance(cluster.now + 0.001) if e.source == "check"]
    for e in events:
        check_payload(e)  # what the remediation consumer reads must pass its checks
    done = [e for e in events if e.kind == "replay_done"]
    assert len(done) == 1 and done[0].data["command_id"] == cmd.id
    assert len(events) == 1 + sum(len(g) for g in done[0].data["plan"].values())  # one report per group
    return done[0].data


def test_a_machine_fault_is_found_where_the_failing_groups_meet():
    cluster = SimulatedCluster(CFG, FaultPlan().fail_at("kernel", node="n004", t=30), auto_recover=False)
    cluster.advance(CFG.start_ts + 40)
    cmd, pending = _reproduction(cluster)
    assert is_reproduction(cmd)
    done = _outcome(cluster, cmd)
    step = judge_reproduction(pending, done["failing_horizontal"], done["failing_vertical"])
    assert (step.rung, step.action, step.nodes) == ("replay_evict", "evict", ("n004",))


def test_with_no_fault_active_nothing_reproduces_and_a_person_is_asked():
    cluster = SimulatedCluster(CFG, FaultPlan())
    cluster.advance(CFG.start_ts + 40)
    cmd, pending = _reproduction(cluster)
    done = _outcome(cluster, cmd)
    assert done["failing_horizontal"] == done["failing_vertical"] == []
    assert judge_reproduction(pending, [], []).rung == "replay_inconclusive"


def test_a_fault_of_the_whole_job_reproduces_everywhere_and_convicts_no_machine():
    cluster = SimulatedCluster(CFG, FaultPlan().fail_at("loss_spike", t=30), auto_recover=False)
    cluster.advance(CFG.start_ts + 35)
    cmd, pending = _reproduction(cluster)
    done = _outcome(cluster, cmd)
    assert len(done["failing_horizontal"]) == len(done["plan"]["horizontal"])
    assert judge_reproduction(pending, done["failing_horizontal"], done["failing_vertical"]).rung == "replay_inconclusive"


def test_a_reproduction_outcome_is_decided_on_the_simulated_clock():
    """The demo's remediation decides each record at its own time: a check result too (decided on
    the wall clock, a reproduction's eviction was stamped 20 minutes ahead of the simulated cluster)."""
    from faultlens.demo.wiring import DiagnosisTap
    from faultlens.events.envelope import Envelope
    from faultlens.streams.runner.types import Record

    seen = []

    class _Handler:
        clock = None

        def handle(self, records):
            seen.append(self.clock())
            return []

    tap = DiagnosisTap(event_time=True).wrap(_Handler())
    done = Envelope(ts=1_700_000_123.5, job="j", node="-", source="check", kind="replay_done",
                    data={"command_id": "c", "failing_horizontal": [], "failing_vertical": []})
    tap.handle([Record(topic="telemetry.checks", partition=0, offset=0, key=b"j", value=done, timestamp_ms=0)])
    assert seen == [1_700_000_123.5]
