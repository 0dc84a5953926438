"""Ladders and standby pools outlive a restart of the remediation consumer (remediation.state)."""

import json
import logging

import pytest

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.ladder import JobLadder
from faultlens.remediation.policy import Policy
from faultlens.remediation.pool import StandbyPool
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig
from faultlens.remediation.state import KEEP_S, StateStore

KEY = SigningKey.generate()
NODES = ["n000", "n001", "n002", "n003"]


def policy(state_file, standby=("s000", "s001"), topology=True):
    """A fresh remediation process: what `faultlens remediate` builds at start."""
    config = PolicyConfig(act_on=frozenset({"j"}), standby_names=standby)
    p = Policy(KEY, config, Safety(SafetyConfig(max_job_share=1.0, breaker_share=1.0), CircuitBreaker(None)),
               state_file=state_file)
    if topology:  # a restarted consumer reads the jobs topic first (consumer.prime_topologies)
        p.observe_topology("j", Topology.grid(NODES, 1, 1, 2, 2))
    return p


def crash(ts):
    return Diagnosis(job="j", ts=ts, onset=ts, fault="cuda_error", action="stop_time_diagnosis")


def evict(node, ts):
    return Diagnosis(job="j", ts=ts, onset=ts, fault="gpu_lost", action="evict", nodes=(node,), confidence=0.95)


def test_a_ladder_at_rollback_climbs_to_the_next_rung_after_a_restart(tmp_path):
    path = tmp_path / "state.json"
    first = policy(path)
    assert [first.decide(crash(1000 + 100 * i), 1000 + 100 * i)[0].rung for i in range(2)] == ["reattempt", "rollback"]
    saved = json.loads(path.read_text())["jobs"]["j"]["ladder"]
    assert (saved["rung"], saved["count"], saved["last"]) == ("rollback", 2, 1100.0)

    restarted = policy(path)
    assert restarted.ladders["j"].rung == "rollback"
    decision, cmd = restarted.decide(crash(1200), 1200)
    assert decision.rung == "dual_phase_replay" and cmd.params["mode"] == "dual_phase_replay"
    # the same restart without a state file starts over: what this file is for
    assert policy(None).decide(crash(1200), 1200)[0].rung == "reattempt"


def test_a_report_of_the_same_incident_after_a_restart_does_not_climb(tmp_path):
    path = tmp_path / "state.json"
    policy(path).decide(crash(1000), 1000)
    assert policy(path).decide(crash(1010), 1010)[0].rung == "same_incident"  # within the settle time


def test_a_spare_handed_out_is_not_handed_out_again_after_a_restart(tmp_path):
    path = tmp_path / "state.json"
    d1 = evict("n001", 1000)
    _, cmd = policy(path).decide(d1, 1000)
    assert cmd.params["replacements"] == ["s000"]

    restarted = policy(path)
    assert restarted.pools["j"].spares == ["s001"] and restarted.pools["j"].used == ["s000"]
    _, cmd2 = restarted.decide(evict("n002", 2000), 2000)
    assert cmd2.params["replacements"] == ["s001"]
    # the first diagnosis redelivered (decided, not committed before the crash): same spare, same id
    _, again = policy(path).decide(d1, 2001)
    assert again.params["replacements"] == ["s000"] and again.id == cmd.id
    assert policy(path).pools["j"].spares == []


def test_an_eviction_before_the_topology_keeps_its_spare_when_the_topology_arrives(tmp_path):
    p = policy(tmp_path / "state.json", topology=False)
    assert p.decide(evict("n001", 1000), 1000)[1].params["replacements"] == ["s000"]
    p.observe_topology("j", Topology.grid(NODES, 1, 1, 2, 2))
    assert "s000" not in p.pools["j"].spares


def test_a_spare_the_job_now_runs_on_is_no_spare_even_without_state():
    p = policy(None)
    p.observe_topology("j", Topology.grid(["n000", "s000", "n002", "n003"], 1, 1, 2, 2))  # s000 replaced n001
    assert p.pools["j"].spares == ["s001"]


@pytest.mark.parametrize("body", ["{not json", "", "[]", '{"version": 99, "jobs": {}}', '{"version": 1, "jobs": []}'])
def test_an_unreadable_file_starts_empty_with_an_error_and_is_kept_aside(tmp_path, caplog, body):
    path = tmp_path / "state.json"
    path.write_text(body)
    with caplog.at_level(logging.ERROR, logger="faultlens.remediation.state"):
        p = policy(path)
    assert p.store.errors and "unreadable remediation state" in p.store.errors[0]
    assert any(r.levelno == logging.ERROR and str(path) in r.getMessage() for r in caplog.records)
    assert [f.read_text() for f in tmp_path.glob("state.json.unreadable-*")] == [body]
    assert p.decide(crash(1000), 1000)[0].rung == "reattempt"
    assert json.loads(path.read_text())["jobs"]["j"]["ladder"]["count"] == 1  # saving works again


def test_a_bad_job_entry_is_reported_and_the_others_are_restored(tmp_path):
    path = tmp_path / "state.json"
    p = policy(path)
    p.decide(crash(1000), 1000)
    state = json.loads(path.read_text())
    state["jobs"]["other"] = {"touched": 1000, "ladder": {"job": "other", "sequence": "x", "failures": ["?"]}}
    state["jobs"]["third"] = {"touched": 1000, "pool": {"job": "nope", "spares": [], "used": ["s9"]}}
    path.write_text(json.dumps(state))
    restarted = policy(path)
    assert len(restarted.store.errors) == 2
    assert "other" not in restarted.ladders and "third" not in restarted.pools
    assert restarted.ladders["j"].failures == [1000.0]


def test_nothing_is_written_when_a_decision_changes_nothing(tmp_path):
    path = tmp_path / "state.json"
    low = Diagnosis(job="j", ts=1000, onset=1000, fault="gpu_lost", action="evict", nodes=("n001",), confidence=0.1)
    assert policy(path).decide(low, 1000)[0].rung == "record"
    assert not path.exists()


def test_jobs_idle_past_the_bound_are_pruned(tmp_path):
    path = tmp_path / "state.json"
    p = policy(path)
    p.decide(crash(1000), 1000)
    other = Diagnosis(job="k", ts=1000 + KEEP_S + 1, onset=1000, fault="cuda_error", action="stop_time_diagnosis")
    p.decide(other, 1000 + KEEP_S + 1)
    assert sorted(json.loads(path.read_text())["jobs"]) == ["k"]


def test_ladder_and_pool_round_trip_and_refuse_garbage():
    ladder = JobLadder("j", settle_s=30)
    for ts in (1000, 1100):
        ladder.decide(crash(ts), tuple(NODES))
    back = JobLadder.from_dict(json.loads(json.dumps(ladder.to_dict())), settle_s=30)
    assert (back.failures, back.sequence, back.rung) == (ladder.failures, ladder.sequence, ladder.rung)
    pool = StandbyPool.for_job("j", 4, ["s0", "s1"])
    pool.take_for("d1", 1)
    assert StandbyPool.from_dict(json.loads(json.dumps(pool.to_dict()))) == pool
    for bad in (None, {"job": "j", "sequence": "nope", "failures": []}, {"job": "j", "sequence": "", "failures": [True]},
                {"job": "", "sequence": "", "failures": []}):
        with pytest.raises(ValueError):
            JobLadder.from_dict(bad)
    for bad in ([], {"job": "j", "spares": "s0", "used": []}, {"job": "j", "spares": [], "used": [], "allocations": {"d": "s0"}}):
        with pytest.raises(ValueError):
            StandbyPool.from_dict(bad)


def test_store_save_leaves_no_temporary_file(tmp_path):
    store = StateStore(tmp_path / "sub" / "state.json")
    store.save({}, 1.0)
    assert [f.name for f in (tmp_path / "sub").iterdir()] == ["state.json"]
    assert json.loads((tmp_path / "sub" / "state.json").read_text()) == {"version": 1, "saved_at": 1.0, "jobs": {}}
