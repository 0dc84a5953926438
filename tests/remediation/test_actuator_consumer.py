"""Decisions → actuator operations (plan), and the remediation handler carrying them out.

The recording actuator here is an in-memory stand-in for unit tests of the wiring; the real
scheduler is exercised by test_actuator_slurm.py (real slurmctld) and, end to end through the
handler, by the `slurm` test at the bottom.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from faultlens.events.action_record import ActionRecord
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.remediation.actuators.base import ActionRequest, Actuator, ActuatorError
from faultlens.remediation.actuators.plan import plan
from faultlens.remediation.consumer import ACTIONS_TOPIC, COMMANDS_TOPIC, DIAGNOSES_TOPIC, RemediationHandler
from faultlens.remediation.decision import Decision, PolicyConfig
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig
from faultlens.streams.runner.loop import Record

KEY = SigningKey.generate()
NODES = ["n000", "n001", "n002", "n003"]


class RecordingActuator(Actuator):
    name = "recording"

    def __init__(self, fail: dict[str, str] | None = None):
        self.calls: list[ActionRequest] = []
        self.fail = fail or {}

    def _do(self, request: ActionRequest) -> str:
        self.calls.append(request)
        if request.op in self.fail:
            raise ActuatorError(self.fail[request.op])
        return f"{request.op} {','.join(request.nodes)}"

    take_out = requeue = bring_back = _do


def decision(action="evict", nodes=("n001",), blocked="", params=None, mode="act"):
    command = {"action": action, "params": params or {}} if not blocked else None
    return Decision(1000.0, "j", "d-1", "gpu_lost", "hardware_evict", action, tuple(nodes), "gpu_lost: evict", mode,
                    mode == "act", blocked, command)


def test_an_eviction_takes_the_nodes_out_then_requeues_the_job():
    ops = plan(decision())
    assert [(r.op, r.nodes) for r in ops] == [("take_out", ("n001",)), ("requeue", ("n001",))]
    assert ops[0].scheduler_reason() == "faultlens diagnosis=d-1 fault=gpu_lost: gpu_lost: evict"
    assert [r.op for r in plan(decision(), requeue_on_evict=False)] == ["take_out"]


def test_blocked_and_in_place_decisions_ask_nothing_of_the_scheduler():
    assert plan(decision(blocked="cap: 1 of 4 nodes")) == []
    assert plan(decision(action="reattempt", nodes=())) == []
    assert plan(decision(action="none", nodes=("n001",))) == []


def test_bring_back_param_resumes_machines_that_passed_their_checks():
    ops = plan(decision(action="reattempt", nodes=(), params={"bring_back": ["n002", "n003", "n002", 7]}))
    assert [(r.op, r.nodes) for r in ops] == [("bring_back", ("n002", "n003"))]
    # Evicted and passed at once cannot be: the eviction wins, the rest comes back first.
    ops = plan(decision(params={"bring_back": ["n001", "n002"]}))
    assert [(r.op, r.nodes) for r in ops] == [("bring_back", ("n002",)), ("take_out", ("n001",)),
                                               ("requeue", ("n001",))]
    assert plan(decision(action="reattempt", nodes=(), params={"bring_back": "oops not a list"}))[0].nodes == (
        "oops not a list",)  # one name is a name
    assert plan(decision(action="reattempt", nodes=(), params={"bring_back": {"n1": 1}})) == []


def handler_for(mode, actuator, tmp_path):
    config = PolicyConfig(act_on=frozenset({"j"}) if mode != "observe" else frozenset(), dry_run=mode == "dry_run",
                          standby_names=("s000",))
    policy = Policy(KEY, config, Safety(SafetyConfig(max_job_share=0.5, breaker_share=0.9), CircuitBreaker(None)))
    policy.observe_topology("j", Topology.grid(NODES, 1, 1, 2, 2))
    return RemediationHandler(policy, decision_log=tmp_path / "decisions.jsonl", clock=lambda: 2000.0,
                              actuator=actuator)


def diagnosis_record(node="n001", offset=0):
    d = Diagnosis(job="j", ts=1000.0, onset=1000.0, fault="gpu_lost", action="evict", nodes=(node,), confidence=0.95)
    return Record(DIAGNOSES_TOPIC, 0, offset, b"j", d, 0), d


def test_acting_handler_drains_requeues_and_publishes_each_outcome(tmp_path):
    actuator = RecordingActuator()
    handler = handler_for("act", actuator, tmp_path)
    record, d = diagnosis_record()
    out = handler.handle([record])
    assert [o.topic for o in out] == [COMMANDS_TOPIC, ACTIONS_TOPIC, ACTIONS_TOPIC]
    actions = [ActionRecord.decode(o.value) for o in out if o.topic == ACTIONS_TOPIC]
    assert [(a.op, a.outcome, a.detail, a.diagnosis_id) for a in actions] == [
        ("take_out", "ok", "take_out n001", d.id), ("requeue", "ok", "requeue n001", d.id)]
    assert [c.op for c in actuator.calls] == ["take_out", "requeue"]
    line = json.loads((tmp_path / "decisions.jsonl").read_text())
    assert [a["op"] for a in line["actions"]] == ["take_out", "requeue"] and line["sent"]


@pytest.mark.parametrize("mode", ["observe", "dry_run"])
def test_observe_only_and_dry_run_record_the_intended_action_and_do_nothing(tmp_path, mode):
    actuator = RecordingActuator()
    handler = handler_for(mode, actuator, tmp_path)
    out = handler.handle([diagnosis_record()[0]])
    assert actuator.calls == []
    actions = [ActionRecord.decode(o.value) for o in out if o.topic == ACTIONS_TOPIC]
    assert [(a.op, a.outcome, a.mode) for a in actions] == [("take_out", "skipped", mode), ("requeue", "skipped", mode)]
    assert "would take out n001 with recording" in actions[0].detail
    assert not any(o.topic == COMMANDS_TOPIC for o in out)


def test_a_failing_actuator_is_recorded_and_the_consumer_goes_on(tmp_path):
    actuator = RecordingActuator(fail={"take_out": "scontrol: Invalid node name specified"})
    handler = handler_for("act", actuator, tmp_path)
    first = handler.handle([diagnosis_record("n001", 0)[0]])
    actions = [ActionRecord.decode(o.value) for o in first if o.topic == ACTIONS_TOPIC]
    assert [(a.op, a.outcome) for a in actions] == [("take_out", "error"), ("requeue", "skipped")]
    assert actions[0].detail == "scontrol: Invalid node name specified"
    assert actions[1].detail == "not requeued: taking the nodes out failed"
    assert [c.op for c in actuator.calls] == ["take_out"]  # the job is not requeued onto the bad machine
    assert any(o.topic == COMMANDS_TOPIC for o in first)  # the trainer still gets its evict

    class Broken(RecordingActuator):
        def _do(self, request):
            raise KeyError("a bug in an actuator")
        take_out = requeue = bring_back = _do

    handler.actuator = Broken()
    second = handler.handle([diagnosis_record("n002", 1)[0]])
    errors = [ActionRecord.decode(o.value) for o in second if o.topic == ACTIONS_TOPIC]
    assert errors[0].outcome == "error" and errors[0].detail.startswith("KeyError")


def test_action_records_round_trip_and_refuse_garbage():
    rec = ActionRecord(ts=1.0, job="j", op="take_out", actuator="slurm", nodes=("n1",), diagnosis_id="d-1",
                       outcome="error", detail="x")
    assert ActionRecord.decode(rec.encode()) == rec
    again = msgspec.structs.replace(rec, ts=2.0, outcome="ok", id="")
    assert again.id == rec.id  # the same operation for the same diagnosis: one history row
    by_hand = msgspec.structs.replace(rec, diagnosis_id="", id="")
    assert msgspec.structs.replace(by_hand, ts=2.0, id="").id != by_hand.id  # each one by hand is its own row
    for bad in (b"null", b"[]", b'{"id": "x"}', b"not json",
                rec.encode().replace(b'"take_out"', b'"reboot"'),
                rec.encode().replace(b'"nodes":["n1"]', b'"nodes":"n1"')):
        with pytest.raises(ValueError):
            ActionRecord.decode(bad)


def test_slurm_drain_through_the_remediation_handler(slurm_controller):
    """A hardware diagnosis in act mode drains the machine on a real slurmctld."""
    from faultlens.remediation.actuators.slurm import SlurmActuator, SlurmConfig
    from tests.remediation.slurm_fixture import GHOST_NODES

    cluster = slurm_controller
    ghosts = list(GHOST_NODES)
    config = PolicyConfig(act_on=frozenset({"j"}), standby_names=("s000",))
    policy = Policy(KEY, config, Safety(SafetyConfig(max_job_share=0.5, breaker_share=0.9), CircuitBreaker(None)))
    policy.observe_topology("j", Topology.grid([*ghosts, "fl-spare"], 1, 1, 2, 2))
    handler = RemediationHandler(policy, actuator=SlurmActuator(SlurmConfig(env=cluster.env)),
                                 requeue_on_evict=False)
    record, d = diagnosis_record(ghosts[1])
    out = handler.handle([record])
    (action,) = [ActionRecord.decode(o.value) for o in out if o.topic == ACTIONS_TOPIC]
    assert action.outcome == "ok" and action.actuator == "slurm"
    assert "DRAIN" in cluster.node_state(ghosts[1]).split("+")
    shown = cluster.run(["scontrol", "show", "node", "-o", ghosts[1]]).stdout
    assert f"Reason=faultlens diagnosis={d.id} fault=gpu_lost" in shown
    assert "DRAIN" not in cluster.node_state(ghosts[0])


def test_without_an_actuator_nothing_is_recorded_beyond_the_decision(tmp_path):
    handler = handler_for("act", None, tmp_path)
    out = handler.handle([diagnosis_record()[0]])
    assert [o.topic for o in out] == [COMMANDS_TOPIC]
    assert json.loads((tmp_path / "decisions.jsonl").read_text())["actions"] == []
