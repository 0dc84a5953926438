"""Stop-time diagnosis in the policy: run_checks → wait for every node → evict only failures,
reattempt when all pass, never evict on silence, bring back machines that pass; state survives a
restart of the remediation consumer; dual-phase reproduction convicts only a lone meeting point."""

from __future__ import annotations

import json

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.ladder import dual_phase_plan
from faultlens.remediation.policy import Policy
from faultlens.remediation.reproduction import PendingReproduction, judge_reproduction
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig

KEY = SigningKey.generate()
NODES = ["n000", "n001", "n002", "n003"]
EPOCH = 1_700_000_000.0  # envelopes need a plausible epoch time; the policy's clock here starts at 0


def policy(tmp_path=None, mode="act", **config):
    cfg = PolicyConfig(act_on=frozenset({"j"}) if mode == "act" else frozenset(), standby_names=("s000", "s001"),
                       stop_checks=True, checks_wait_s=100.0, **config)
    p = Policy(KEY, cfg, Safety(SafetyConfig(max_job_share=0.5, breaker_share=0.9), CircuitBreaker(None)),
               state_file=tmp_path / "state.json" if tmp_path else None)
    p.observe_topology("j", Topology.grid(NODES, 1, 1, 2, 2))
    return p


def crash(ts=1000.0, fault="cuda_error", did=None):
    kw = {"id": did} if did else {}
    return Diagnosis(job="j", ts=ts, onset=ts, fault=fault, action="stop_time_diagnosis", nodes=(), ranks=(2,),
                     confidence=0.6, **kw)


def result(node, request_id, ts, passed=True, failed=(), inconclusive=()):
    checks = [{"name": n, "passed": n not in failed, "skipped": False, "duration_s": 0.5, "inconclusive": n in inconclusive,
               "detail": "gpu0: row remap pending (needs a GPU reset)" if n in failed else "ok"}
              for n in ("gpu_health", "compute", "collective", "disk", "memory")]
    return Envelope(ts=EPOCH + ts, job="j", node=node, source="check", kind="result",
                    data={"request_id": request_id, "diagnosis_id": "", "passed": passed and not failed,
                          "failed": list(failed), "checks": checks, "duration_s": 3.0})


def test_a_crash_asks_every_node_and_waits():
    p = policy()
    decision, cmd = p.decide(crash(), 1000.0)
    assert cmd.action == "run_checks" and set(cmd.nodes) == set(NODES) and cmd.verify(KEY.verify_keys())
    assert decision.rung == "stop_time_checks" and decision.sent
    assert cmd.params["then"] == "reattempt"
    # Three of four answered: nothing happens yet, not even at a tick before the deadline.
    for n in NODES[:3]:
        assert p.observe_check(result(n, cmd.id, 1010.0), 1010.0) == []
    assert p.tick(1050.0) == []
    [(decision, reattempt)] = p.observe_check(result("n003", cmd.id, 1012.0), 1012.0)
    assert reattempt.action == "reattempt"
    assert decision.rung == "reattempt" and "stop-time checks passed" in decision.reason
    assert reattempt.params["checks_passed"] == NODES
    assert "j" not in p.pending_checks


def test_only_the_failing_node_is_evicted_and_no_reattempt_follows():
    p = policy()
    _, cmd = p.decide(crash(), 1000.0)
    out = []
    for n in NODES:
        out += p.observe_check(result(n, cmd.id, 1010.0, failed=("gpu_health",) if n == "n002" else ()), 1010.0)
    [(decision, evict)] = out
    assert evict.action == "evict" and evict.nodes == ("n002",)
    assert evict.params["failed_checks"] == {"n002": ["gpu_health"]} and evict.params["replacements"] == ["s000"]
    assert "row remap pending" in evict.reason
    assert set(p.taken_out["j"]) == {"n002"}


def test_a_check_that_could_not_run_is_no_evidence():
    p = policy()
    _, cmd = p.decide(crash(), 1000.0)
    out = []
    for n in NODES:
        bad = ("collective",) if n == "n001" else ()
        out += p.observe_check(result(n, cmd.id, 1010.0, failed=bad, inconclusive=bad), 1010.0)
    assert [d.rung for d, _ in out] == ["checks_unclear", "reattempt"]
    assert not any(c is not None and c.action == "evict" for _, c in out)
    assert out[1][1].params["suspects"] == ["n001"] and "n001" not in out[1][1].params["checks_passed"]
    # One conclusive failure beside an inconclusive one is evidence: that machine goes.
    p2 = policy()
    _, cmd = p2.decide(crash(), 1000.0)
    out = []
    for n in NODES:
        bad = ("collective", "compute") if n == "n001" else ()
        out += p2.observe_check(result(n, cmd.id, 1010.0, failed=bad, inconclusive=("collective",) if bad else ()),
                                1010.0)
    [(_, evict)] = out
    assert evict.nodes == ("n001",) and evict.params["failed_checks"] == {"n001": ["compute"]}


def test_results_for_another_request_or_a_stranger_are_ignored():
    p = policy()
    _, cmd = p.decide(crash(), 1000.0)
    assert p.observe_check(result("n000", "forged-request", 1001.0, failed=("compute",)), 1001.0) == []
    assert p.observe_check(result("x999", cmd.id, 1001.0, failed=("compute",)), 1001.0) == []
    assert p.pending_checks["j"].results == {}
    # The first answer per node counts: a second, contradicting one does not replace it.
    p.observe_check(result("n000", cmd.id, 1002.0), 1002.0)
    p.observe_check(result("n000", cmd.id, 1003.0, failed=("disk",)), 1003.0)
    assert p.pending_checks["j"].results["n000"]["passed"] is True


def test_a_silent_node_is_asked_again_then_reported_but_never_evicted():
    p = policy()
    _, cmd = p.decide(crash(), 1000.0)
    for n in NODES[:3]:
        p.observe_check(result(n, cmd.id, 1010.0), 1010.0)
    [(decision, again)] = p.tick(1101.0)  # past the deadline: ask the silent one again
    assert again.action == "run_checks" and again.nodes == ("n003",) and again.id != cmd.id
    assert p.tick(1150.0) == []
    steps = p.tick(1202.0)
    rungs = [d.rung for d, _ in steps]
    assert rungs == ["checks_silent", "reattempt"]
    assert not any(c is not None and c.action == "evict" for _, c in steps)
    silent, (_, reattempt) = steps[0][0], steps[1]
    assert silent.nodes == ("n003",) and "not evicted on silence" in silent.reason
    assert reattempt.params["suspects"] == ["n003"]


def test_a_late_answer_to_the_second_ask_counts():
    p = policy()
    _, cmd = p.decide(crash(), 1000.0)
    for n in NODES[:3]:
        p.observe_check(result(n, cmd.id, 1010.0), 1010.0)
    [(_, again)] = p.tick(1101.0)
    [(decision, evict)] = p.observe_check(result("n003", again.id, 1120.0, failed=("memory",)), 1120.0)
    assert evict.action == "evict" and evict.nodes == ("n003",)


def test_diagnoses_while_checks_run_do_not_climb_the_ladder():
    p = policy()
    p.decide(crash(), 1000.0)
    decision, cmd = p.decide(crash(ts=1060.0), 1060.0)  # another rank's log, read late
    assert cmd is None and decision.rung == "waiting"
    assert len(p.ladders["j"].failures) == 1
    # Hardware evidence is not held back.
    hw = Diagnosis(job="j", ts=1061.0, onset=1061.0, fault="gpu_lost", action="evict", nodes=("n001",), confidence=0.95)
    assert p.decide(hw, 1061.0)[1].action == "evict"


def test_a_machine_taken_out_is_rechecked_and_brought_back_when_it_passes():
    p = policy(settle_s=10.0)
    _, cmd = p.decide(crash(), 1000.0)
    for n in NODES:
        p.observe_check(result(n, cmd.id, 1010.0, failed=("compute",) if n == "n001" else ()), 1010.0)
    assert set(p.taken_out["j"]) == {"n001"}
    # The job now runs on the standby; a later crash (a new episode) asks n001 too.
    p.observe_topology("j", Topology.grid(["n000", "s000", "n002", "n003"], 1, 1, 2, 2))
    _, cmd2 = p.decide(crash(ts=9000.0, did="d2"), 9000.0)
    assert "n001" in cmd2.nodes and cmd2.params["recheck"] == ["n001"]
    out = []
    for n in ["n000", "s000", "n002", "n003"]:
        out += p.observe_check(result(n, cmd2.id, 9010.0), 9010.0)
    # The job's own machines passed: its reattempt does not wait for the machine that is out.
    assert [d.rung for d, _ in out] == ["reattempt"]
    assert p.decide(crash(ts=9020.0, did="d3"), 9020.0)[0].rung != "waiting"
    [(back, cmd)] = p.observe_check(result("n001", cmd2.id, 9011.0), 9011.0)
    assert cmd is None and back.rung == "bring_back"
    assert back.params == {"bring_back": ["n001"]} and back.nodes == ("n001",)
    assert "j" not in p.taken_out and "j" not in p.pending_checks


def test_a_machine_taken_out_that_stays_silent_stays_out():
    p = policy(settle_s=10.0)
    p.taken_out["j"] = {"n009": "d0"}
    _, cmd = p.decide(crash(), 1000.0)
    assert cmd.params["recheck"] == ["n009"]
    for n in NODES:
        p.observe_check(result(n, cmd.id, 1010.0), 1010.0)
    assert p.pending_checks["j"].settled
    assert p.tick(1200.0) == []  # no bring_back, no alert: it is out already
    assert "j" not in p.pending_checks and p.taken_out["j"] == {"n009": "d0"}


def test_checks_off_keeps_the_old_ladder():
    p = Policy(KEY, PolicyConfig(act_on=frozenset({"j"})))
    p.observe_topology("j", Topology.grid(NODES, 1, 1, 2, 2))
    assert p.decide(crash(), 1000.0)[1].action == "reattempt"


def test_pending_checks_survive_a_restart_of_the_consumer(tmp_path):
    p = policy(tmp_path)
    _, cmd = p.decide(crash(), 1000.0)
    p.observe_check(result("n000", cmd.id, 1010.0), 1010.0)
    p.observe_check(result("n001", cmd.id, 1010.0, failed=("disk",)), 1010.0)
    saved = json.loads((tmp_path / "state.json").read_text())
    assert set(saved["jobs"]["j"]["checks"]["results"]) == {"n000", "n001"}

    again = policy(tmp_path)  # a restarted remediator
    assert again.pending_checks["j"].requests == [cmd.id]
    assert again.decide(crash(ts=1030.0), 1030.0)[0].rung == "waiting"
    out = again.observe_check(result("n002", cmd.id, 1040.0), 1040.0)
    out += again.observe_check(result("n003", cmd.id, 1041.0), 1041.0)
    [(decision, evict)] = out
    assert evict.nodes == ("n001",)
    third = policy(tmp_path)
    assert "j" not in third.pending_checks and set(third.taken_out["j"]) == {"n001"}
    assert len(third.ladders["j"].failures) == 1  # the episode goes on where it was


def test_a_restart_mid_reproduction_still_judges_the_outcome(tmp_path):
    p = policy(tmp_path, settle_s=1.0)
    for i, ts in enumerate((1000.0, 1010.0, 1020.0)):
        d = crash(ts=ts, did=f"d{i}")
        if i == 0:
            _, cmd = p.decide(d, ts)
            for n in NODES:
                p.observe_check(result(n, cmd.id, ts + 1), ts + 1)
        else:
            decision, cmd = p.decide(d, ts)
    assert decision.rung == "dual_phase_replay" and cmd.action == "restart"
    again = policy(tmp_path, settle_s=1.0)
    assert again.reproductions["j"].command_id == cmd.id
    done = Envelope(ts=EPOCH + 1100.0, job="j", node="-", source="check", kind="replay_done",
                    data={"command_id": cmd.id, "failing_horizontal": [1], "failing_vertical": [0]})
    [(decision, evict)] = again.observe_check(done, 1100.0)
    plan = dual_phase_plan(NODES)
    assert evict.nodes == plan.culprits([1], [0]) == ("n002",)
    assert decision.rung == "replay_evict"


def test_reproduction_verdicts():
    plan = dual_phase_plan(NODES)  # rows (n000 n001) (n002 n003); columns (n000 n002) (n001 n003)
    p = PendingReproduction("j", "c", crash().to_dict(), plan, 0.0, 1.0)
    assert judge_reproduction(p, [0], [1]).nodes == ("n001",)
    for fh, fv, why in (([], [], "no horizontal group"), ([0, 1], [0], "every horizontal group"),
                        ([0], [], "no vertical group")):
        step = judge_reproduction(p, fh, fv)
        assert step.action is None and step.rung == "replay_inconclusive" and why in step.reason
    two = PendingReproduction("j", "c", crash().to_dict(), dual_phase_plan(["a", "b"]), 0.0, 1.0)
    assert judge_reproduction(two, [0], [1]).nodes == ("b",)  # the whole job reproduces, one half does
    one = PendingReproduction("j", "c", crash().to_dict(), dual_phase_plan(["a"]), 0.0, 1.0)
    assert judge_reproduction(one, [0], [0]).action is None  # one machine: a reproduction alone convicts nobody


def test_a_reproduction_that_never_reports_asks_a_person():
    p = policy(settle_s=1.0, reproduction_wait_s=500.0)
    _, cmd = p.decide(crash(ts=1000.0, did="d0"), 1000.0)
    for n in NODES:
        p.observe_check(result(n, cmd.id, 1001.0), 1001.0)
    p.decide(crash(ts=1010.0, did="d1"), 1010.0)
    p.decide(crash(ts=1020.0, did="d2"), 1020.0)
    assert "j" in p.reproductions
    [(decision, cmd)] = p.tick(1600.0)
    assert cmd is None and decision.rung == "replay_inconclusive"
    assert "j" not in p.reproductions


def test_the_decision_log_line_carries_the_params():
    p = policy(mode="observe")
    decision, cmd = p.decide(crash(), 1000.0)
    assert cmd is None and decision.command["action"] == "run_checks"
    assert json.loads(json.dumps(decision.to_dict()))["params"]["then"] == "reattempt"
    assert Command.from_dict(decision.command).nodes == tuple(NODES)


def test_the_consumer_routes_check_events_and_ticks_deadlines(tmp_path):
    from faultlens.remediation.consumer import CHECKS_TOPIC, COMMANDS_TOPIC, DIAGNOSES_TOPIC, RemediationHandler
    from faultlens.streams.runner.loop import Record

    now = [1000.0]
    handler = RemediationHandler(policy(), decision_log=tmp_path / "decisions.jsonl", clock=lambda: now[0])
    [out] = handler.handle([Record(DIAGNOSES_TOPIC, 0, 0, b"j", crash(), 0)])
    ask = Command.decode(out.value)
    assert out.topic == COMMANDS_TOPIC and ask.action == "run_checks"
    records = [Record(CHECKS_TOPIC, 0, i, n.encode(), result(n, ask.id, 1010.0), 0) for i, n in enumerate(NODES[:3])]
    assert list(handler.handle(records)) == []
    now[0] = 1101.0
    [again] = handler.tick(0.0)  # the handler judges on its own clock
    assert Command.decode(again.value).nodes == ("n003",)
    now[0] = 1150.0
    [evict] = handler.handle([Record(CHECKS_TOPIC, 0, 9, b"n003",
                                     result("n003", Command.decode(again.value).id, 1149.0, failed=("collective",)), 0)])
    assert Command.decode(evict.value).nodes == ("n003",)
    logged = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [d["rung"] for d in logged] == ["stop_time_checks", "stop_time_checks", "checks_failed"]
    assert logged[-1]["params"]["failed_checks"] == {"n003": ["collective"]}


def test_a_state_file_from_before_checks_still_loads(tmp_path):
    old = {"version": 1, "saved_at": 5.0, "jobs": {"j": {"touched": 5.0, "pool": None, "ladder": {
        "job": "j", "sequence": "stop_time_diagnosis", "rung": "reattempt", "count": 1, "last": 900.0,
        "failures": [900.0]}}}}
    (tmp_path / "state.json").write_text(json.dumps(old))
    p = policy(tmp_path)
    assert p.store.errors == [] and p.ladders["j"].failures == [900.0]
    assert p.pending_checks == {} and p.reproductions == {} and p.taken_out == {}


def test_a_damaged_pending_entry_is_reported_and_that_job_starts_afresh(tmp_path):
    p = policy(tmp_path)
    p.decide(crash(), 1000.0)
    saved = json.loads((tmp_path / "state.json").read_text())
    saved["jobs"]["j"]["checks"]["deadline"] = "soon"
    (tmp_path / "state.json").write_text(json.dumps(saved))
    again = policy(tmp_path)
    assert "j" not in again.pending_checks and any("pending checks" in e for e in again.store.errors)
