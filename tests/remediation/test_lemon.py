"""The lemon policy, pure (remediation.lemon, remediation.fleet, events.fleet_record): which
faults count against a machine across jobs, and when it is taken out for good."""

import pytest

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.fleet_record import MachineRecord
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.remediation.actuators import plan
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.fleet import Fleet
from faultlens.remediation.lemon import DAY_S, LEMON_STATE, ClassRule, LemonConfig, classify, parse_rules
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig

KEY = SigningKey.generate()
T0 = 1_767_225_600.0


def diag(job, node, fault="gpu_lost", action="evict", ts=T0, confidence=0.95, nodes=None, detail=""):
    return Diagnosis(job=job, ts=ts, onset=ts, fault=fault, action=action, nodes=nodes or (node,),
                     confidence=confidence, detail=detail)


def test_lemon_same_hardware_class_twice_in_different_jobs_within_a_week():
    fleet = Fleet()
    assert fleet.observe_diagnosis(diag("job-a", "n7", "nvlink"), T0) == []
    lemons = fleet.observe_diagnosis(diag("job-b", "n7", "nvlink", ts=T0 + 2 * DAY_S), T0 + 2 * DAY_S)
    assert [(lemon.node, lemon.job, lemon.verdict.rule) for lemon in lemons] == [("n7", "job-b", "repeat:nvlink")]
    assert len(lemons[0].verdict.diagnosis_ids) == 2 and "job-a" in lemons[0].verdict.reason
    assert fleet.record("n7").state() == LEMON_STATE and fleet.lemons() == {"n7"}


def test_lemon_not_when_the_repeat_is_older_than_the_window():
    fleet = Fleet()
    fleet.observe_diagnosis(diag("job-a", "n7", "nvlink"), T0)
    # 8 days later: the first is out of the 7-day repeat window; the culprit rule (2 jobs) too
    assert fleet.observe_diagnosis(diag("job-b", "n7", "nvlink", ts=T0 + 8 * DAY_S), T0 + 8 * DAY_S) == []


def test_lemon_never_from_user_code_app_faults_or_group_blames():
    fleet = Fleet()
    for i, job in enumerate(["a", "b", "c", "d"]):
        ts = T0 + i * 3600
        assert fleet.observe_diagnosis(diag(job, "n1", "user_code", "rollback", ts=ts), ts) == []
        # Xid 13 / 31 / 43 (also 43 after 13): the application's doing
        assert fleet.observe_diagnosis(diag(job, "n1", "app_fault", "reattempt", ts=ts + 1), ts + 1) == []
        # a hang's whole pipeline group over-evicted: its healthy members must not become lemons
        assert fleet.observe_diagnosis(diag(job, "n1", "job_hang", "evict", ts=ts + 2, nodes=("n1", "n2")), ts + 2) == []
        # recorded only / asks for evidence
        assert fleet.observe_diagnosis(diag(job, "n1", "gpu_thermal", "alert", ts=ts + 3), ts + 3) == []
    record = fleet.record("n1")
    assert len(record.faults) == 12 and not record.counted() and fleet.lemons() == frozenset()
    assert {f["why"].split(" ")[0] for f in record.faults} == {"user_code", "app_fault", "action"}
    assert "n2" not in fleet.records  # a group blame is held against none of its members


def test_lemon_a_folded_diagnosis_redelivered_counts_once():
    fleet = Fleet()
    d = diag("job-a", "n3", "gpu_memory")
    for _ in range(5):  # redeliveries after a crash, re-emits of a fold with a higher count keep the id
        assert fleet.observe_diagnosis(d, T0) == []
    assert len(fleet.record("n3").faults) == 1


def test_lemon_two_diagnoses_of_one_incident_count_once():
    fleet = Fleet()
    fleet.observe_diagnosis(diag("job-a", "n3", "gpu_lost", ts=T0), T0)
    # the same job, same class, minutes later (a second source, a restart that died at once)
    assert fleet.observe_diagnosis(diag("job-a", "n3", "gpu_lost", ts=T0 + 300, detail="x"), T0 + 300) == []
    # the next day in the same job: a second incident
    assert fleet.observe_diagnosis(diag("job-a", "n3", "gpu_lost", ts=T0 + DAY_S), T0 + DAY_S)


def test_lemon_only_culprit_in_two_different_jobs():
    fleet = Fleet()
    assert fleet.observe_diagnosis(diag("a", "n5", "cuda_error", "stop_time_diagnosis"), T0) == []
    # the same job again does not make it a machine problem
    assert fleet.observe_diagnosis(diag("a", "n5", "cuda_error", "stop_time_diagnosis", ts=T0 + 2 * 3600), T0 + 7200) == []
    lemons = fleet.observe_diagnosis(diag("b", "n5", "nccl_error", "reattempt", ts=T0 + DAY_S), T0 + DAY_S)
    assert [lemon.verdict.rule for lemon in lemons] == ["culprit_jobs"]


def test_lemon_low_confidence_does_not_count():
    fleet = Fleet()
    for i, job in enumerate("abc"):
        ts = T0 + i * 3600
        assert fleet.observe_diagnosis(diag(job, "n5", "nic", confidence=0.3, ts=ts), ts) == []


def test_lemon_two_failed_stop_time_checks():
    fleet = Fleet()
    failed = {"n2": {"passed": False, "ts": T0, "failed": ["dcgm_diag"], "conclusive": ["dcgm_diag"], "detail": "EDPp"}}
    unrun = {"n2": {"passed": False, "ts": T0 + 50, "failed": ["refused"], "conclusive": [], "detail": "refused"}}
    passed = {"n2": {"passed": True, "ts": T0 + 60, "failed": [], "conclusive": []}}
    assert fleet.observe_checks("a", "d1", failed, T0) == []
    assert fleet.observe_checks("a", "d2", unrun, T0 + 50) == []  # could not run: no evidence
    assert fleet.observe_checks("a", "d3", passed, T0 + 60) == []
    again = {"n2": {**failed["n2"], "ts": T0 + DAY_S}}
    assert [lemon.verdict.rule for lemon in fleet.observe_checks("b", "d4", again, T0 + DAY_S)] == ["failed_checks"]


def test_lemon_resume_forgives_the_past_and_is_recorded():
    fleet = Fleet()
    fleet.observe_diagnosis(diag("a", "n7", "nvlink"), T0)
    assert fleet.observe_diagnosis(diag("b", "n7", "nvlink", ts=T0 + 10), T0 + 10)
    record = fleet.resumed("n7", T0 + 20, "alice", "board swapped")
    assert record.state() == "in_service" and record.resumes[-1]["by"] == "alice" and fleet.lemons() == frozenset()
    # one more nvlink fault after the resume is one, not three
    assert fleet.observe_diagnosis(diag("c", "n7", "nvlink", ts=T0 + 30), T0 + 30) == []
    assert fleet.observe_diagnosis(diag("d", "n7", "nvlink", ts=T0 + 40), T0 + 40)  # two new ones: out again


def test_lemon_rules_are_settable_per_class():
    rules = parse_rules("nvlink=3/14, cuda_error=off, host_oom=culprit")
    assert rules["nvlink"] == ClassRule("repeat", 3, 14 * DAY_S)
    assert rules["cuda_error"].mode == "off" and rules["host_oom"].mode == "culprit"
    assert rules["gpu_lost"] == ClassRule("repeat", 2, 7 * DAY_S)  # untouched defaults stay
    fleet = Fleet(LemonConfig(rules=rules))
    for i in range(2):  # one long job, its nvlink failing on n1 on two days: 3 are needed now
        assert fleet.observe_diagnosis(diag("a", "n1", "nvlink", ts=T0 + i * DAY_S), T0 + i * DAY_S) == []
    assert fleet.observe_diagnosis(diag("a", "n1", "nvlink", ts=T0 + 2 * DAY_S), T0 + 2 * DAY_S)
    # a class's count does not lift the cross-job rule: nvlink in two different jobs is still out
    other = Fleet(LemonConfig(rules=rules))
    other.observe_diagnosis(diag("a", "n1", "nvlink"), T0)
    assert other.observe_diagnosis(diag("b", "n1", "nvlink", ts=T0 + DAY_S), T0 + DAY_S)[0].verdict.rule == "culprit_jobs"
    assert not Fleet(LemonConfig(rules=rules, culprit_jobs=0)).observe_diagnosis(diag("b", "n1", "nvlink"), T0)
    for bad in ("nvlnk=2", "nvlink", "nvlink=x", "nvlink=0"):
        with pytest.raises(ValueError):
            parse_rules(bad)
    assert classify(LemonConfig(rules=rules), fault="cuda_error", action="reattempt", nodes=("n",),
                    confidence=1.0).kind == ""


def test_lemon_record_round_trips_and_merges_what_two_members_wrote():
    a, b = Fleet(), Fleet()
    a.observe_diagnosis(diag("job-a", "n9", "nic"), T0)
    b.observe_diagnosis(diag("job-b", "n9", "nic", ts=T0 + 3600), T0 + 3600)
    b.evicted("job-b", ["n9"], "dx", "nic", T0 + 3600)
    mine = MachineRecord.from_dict(a.record("n9").to_dict())
    assert mine.merge(MachineRecord.from_dict(b.record("n9").to_dict()))
    assert len(mine.faults) == 2 and mine.state() == "taken_out"
    assert not mine.merge(MachineRecord.from_dict(mine.to_dict()))  # nothing new the second time
    for bad in ({}, {"version": 1, "node": ""}, {"version": 1, "node": "n", "faults": [{"ts": "x"}]}):
        with pytest.raises(ValueError):
            MachineRecord.from_dict(bad)


def test_lemon_eviction_outcomes():
    fleet = Fleet()
    fleet.evicted("a", ["n1", "n2", "n3"], "d1", "gpu_memory", T0)
    fleet.brought_back(["n1", "n2"], T0 + 100)
    fleet.observe_diagnosis(diag("b", "n2", "gpu_memory", ts=T0 + 200), T0 + 200)
    now = T0 + 2 * DAY_S
    outcome = {n: fleet.record(n).eviction_outcomes(now, DAY_S)[0]["outcome"] for n in ("n1", "n2", "n3")}
    assert outcome == {"n1": "ran_clean", "n2": "failed_again", "n3": "out"}


def policy(fleet=None, standby=("s1", "s2", "s3")):
    p = Policy(KEY, PolicyConfig(act_on=frozenset({"a", "b"}), standby_names=standby),
               Safety(SafetyConfig(max_job_share=1.0, breaker_share=1.0), CircuitBreaker(None)), fleet=fleet)
    for job in ("a", "b"):
        p.observe_topology(job, Topology.grid([f"{job}-n{i}" for i in range(4)] + (["s1"] if job == "a" else []),
                                              1, 1, 1, 5 if job == "a" else 4))
    return p


def test_lemon_policy_drains_it_names_its_record_and_the_pool_skips_it():
    p = policy()
    # s1 (a spare of the shared list) ran in job a and failed there, then in job b's pool
    p.decide(diag("a", "s1", "gpu_memory", ts=T0), T0)
    assert not p.take_followups()
    p.fleet.observe_diagnosis(diag("x", "s1", "gpu_memory", ts=T0 + 3600), T0 + 3600)
    assert p.fleet.lemons() == {"s1"}
    _, cmd = p.decide(diag("b", "b-n1", "gpu_lost", ts=T0 + 7200), T0 + 7200)
    assert cmd.params["replacements"] == ["s2"]  # the lemon is passed over, not handed out
    assert "s1" in p.pools["b"].spares  # kept listed: a person's resume makes it a spare again


def test_lemon_decision_takes_the_machine_out_marked_hardware_inspection():
    p = policy()
    p.decide(diag("a", "a-n2", "nvlink", ts=T0), T0)
    decision, _ = p.decide(diag("b", "a-n2", "nvlink", ts=T0 + 3600), T0 + 3600)
    (lemon,) = p.take_followups()
    assert (lemon.rung, lemon.fault, lemon.nodes, lemon.mode) == (LEMON_STATE, LEMON_STATE, ("a-n2",), "act")
    assert "faultlens nodes show a-n2" in lemon.reason and decision.diagnosis_id == lemon.diagnosis_id
    (req,) = plan(lemon)
    assert (req.op, req.nodes, req.fault) == ("take_out", ("a-n2",), LEMON_STATE)
    assert f"diagnosis={decision.diagnosis_id} fault=hardware_inspection" in req.scheduler_reason()
    assert p.take_followups() == []  # one verdict, one drain
    p.decide(diag("c", "a-n2", "nvlink", ts=T0 + 7200), T0 + 7200)
    assert p.take_followups() == []  # already out: not drained again


def test_lemon_drain_is_blocked_while_the_circuit_breaker_is_open():
    p = policy()
    p.safety.breaker.open, p.safety.breaker.reason = True, "40% of nodes evicted in 600s"
    p.decide(diag("a", "a-n2", "nvlink", ts=T0), T0)
    p.decide(diag("b", "a-n2", "nvlink", ts=T0 + 3600), T0 + 3600)
    (lemon,) = p.take_followups()
    assert lemon.blocked.startswith("circuit breaker open") and plan(lemon) == []
    assert p.fleet.lemons() == {"a-n2"}  # the verdict stays on record for a person


def test_lemon_in_an_observe_only_job_is_recorded_with_its_mode():
    p = Policy(KEY, PolicyConfig(), Safety(SafetyConfig(), CircuitBreaker(None)))
    p.decide(diag("a", "n1", "gpu_lost", ts=T0), T0)
    p.decide(diag("b", "n1", "gpu_lost", ts=T0 + 60), T0 + 60)
    (lemon,) = p.take_followups()
    assert lemon.mode == "observe" and p.fleet.record("n1").lemon["mode"] == "observe"


def test_lemon_that_passes_a_later_recheck_is_not_brought_back():
    from tests.remediation.test_stop_checks import EPOCH, crash, result
    from tests.remediation.test_stop_checks import NODES as N
    from tests.remediation.test_stop_checks import policy as checks_policy

    p = checks_policy(settle_s=10.0)
    _, cmd = p.decide(crash(), 1000.0)
    for n in N:  # n001's compute check fails: taken out, its first failed check on record
        p.observe_check(result(n, cmd.id, 1010.0, failed=("compute",) if n == "n001" else ()), 1010.0)
    assert p.take_followups() == [] and p.fleet.record("n001").checks[-1]["failed"]
    # elsewhere, in another job, n001 failed its checks again: a lemon
    failed = {"passed": False, "ts": EPOCH + 5000.0, "failed": ["memory"], "conclusive": ["memory"], "detail": "ECC"}
    assert p.fleet.observe_checks("other", "dz", {"n001": failed}, 5000.0)[0].verdict.rule == "failed_checks"
    p.observe_topology("j", Topology.grid(["n000", "s000", "n002", "n003"], 1, 1, 2, 2))
    _, cmd2 = p.decide(crash(ts=9000.0, did="d2"), 9000.0)
    assert cmd2.params["recheck"] == ["n001"]
    for n in ["n000", "s000", "n002", "n003"]:
        p.observe_check(result(n, cmd2.id, 9010.0), 9010.0)
    [(back, _)] = p.observe_check(result("n001", cmd2.id, 9011.0), 9011.0)  # it passes this time
    assert back.rung == "bring_back" and back.nodes == () and back.params["bring_back"] == []
    assert LEMON_STATE in back.reason and plan(back) == []  # not brought back: only a person does that
    assert "j" not in p.taken_out  # and not asked again


def test_lemon_never_from_ranks_that_only_waited_on_a_failed_peer():
    """Two jobs on the same machines, each with an NCCL timeout storm: every rank times out, one
    rank (on a different machine each time) is one collective behind. Through the diagnosis engine
    (diagnosis.rules.comms blames the first failing rank only), then the fleet: n003, whose ranks
    only waited in both jobs, is no lemon; were victims counted it would be (two jobs)."""
    from faultlens.diagnosis.engine.offline import analyze
    from tests.diagnosis.diag_events import ev, topology

    events = []
    for job, culprit, t in (("job-a", 5, 100.0), ("job-b", 1, 5000.0)):
        events.append(topology(n=4, gpus=2, job=job, ts=t - 50))
        for r in range(8):
            events.append(ev(t + r * 0.1, f"n{r // 2:03d}", "nccl", "nccl_timeout", job=job, rank=r,
                             seq=811 if r == culprit else 812, op="ALLREDUCE", timeout_ms=120000,
                             elapsed_ms=120004, fault="nccl_error", action="reattempt", severity="error"))
    diagnoses = analyze(events)
    assert sorted((d.job, d.nodes) for d in diagnoses if d.fault == "nccl_error") == [
        ("job-a", ("n002",)), ("job-b", ("n000",))]
    fleet = Fleet()
    for d in sorted(diagnoses, key=lambda d: d.ts):
        assert fleet.observe_diagnosis(d, d.ts) == []
    assert fleet.lemons() == frozenset() and "n003" not in fleet.records


def test_lemon_judged_on_the_failures_own_times_not_the_wall_clock():
    """A replayed trace (or a consumer far behind) decides old diagnoses now: they are judged by
    their own times; and the two jobs of one machine decided out of order count as they happened."""
    fleet = Fleet()
    old = T0 - 400 * DAY_S
    later = diag("b", "n4", "nic", ts=old + DAY_S)
    assert fleet.observe_diagnosis(later, T0) == []  # decided first (its partition was ahead)
    assert fleet.observe_diagnosis(diag("a", "n4", "nic", ts=old), T0 + 1)[0].verdict.rule == "repeat:nic"
    far = Fleet()
    far.observe_diagnosis(diag("a", "n5", "nic", ts=old), T0)
    assert far.observe_diagnosis(diag("b", "n5", "nic", ts=old + 8 * DAY_S), T0) == []  # 8 days apart
    assert far.observe_diagnosis(diag("c", "n5", "nic", ts=old + 4 * DAY_S), T0)  # between the two: 4 days each
