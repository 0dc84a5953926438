from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.remediation.decision import PolicyConfig, command_id
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig

KEY = SigningKey.generate()
NODES = ["n000", "n001", "n002", "n003"]


def policy(mode="act", tmp_path=None, **safety):
    config = PolicyConfig(act_on=frozenset({"j"}) if mode != "observe" else frozenset(), dry_run=mode == "dry_run",
                          standby_names=("s000",))
    p = Policy(KEY, config, Safety(SafetyConfig(**{"max_job_share": 0.5, "breaker_share": 0.9, **safety}),
                                      CircuitBreaker(tmp_path / "b.json" if tmp_path else None)))
    p.observe_topology("j", Topology.grid(NODES, 1, 1, 2, 2))
    return p


def evict(node="n001", ts=1000.0, fault="gpu_lost", did=None):
    kw = {"id": did} if did else {}
    return Diagnosis(job="j", ts=ts, onset=ts, fault=fault, action="evict", nodes=(node,), confidence=0.95, **kw)


def test_acting_makes_a_signed_idempotent_command_with_standby_and_expiry():
    p = policy()
    d = evict()
    decision, cmd = p.decide(d, 2000.0)
    assert decision.sent and decision.mode == "act"
    assert cmd.key_id == KEY.key_id and cmd.verify(KEY.verify_keys())
    assert not cmd.verify(SigningKey.generate().verify_keys())
    assert cmd.id == command_id(d.id, "evict") and cmd.diagnosis_id == d.id
    assert (cmd.action, cmd.nodes, cmd.issued_at, cmd.expires_at) == ("evict", ("n001",), 2000.0, 2300.0)
    assert cmd.params["replacements"] == ["s000"] and cmd.params["standby_shortfall"] == 0
    assert Command.decode(cmd.encode()) == cmd
    # the same diagnosis decided by another remediator process gives the same command id
    assert policy().decide(d, 2001.0)[1].id == cmd.id


def test_observe_only_and_dry_run_send_nothing():
    for mode in ("observe", "dry_run"):
        decision, cmd = policy(mode).decide(evict(), 2000.0)
        assert cmd is None and not decision.sent and decision.mode == mode
        assert decision.command["action"] == "evict"  # what would have been sent is logged


def test_repeated_diagnosis_makes_one_command():
    p = policy()
    assert p.decide(evict(ts=1000), 1000)[1] is not None
    decision, cmd = p.decide(evict(ts=1005), 1005)
    assert cmd is None and decision.blocked.startswith("duplicate")


def test_share_cap_then_breaker_block_evictions(tmp_path):
    p = policy(tmp_path=tmp_path, max_job_share=0.25, breaker_share=0.3)
    assert p.decide(evict("n001"), 1000)[1] is not None
    decision, cmd = p.decide(evict("n002", fault="nic"), 1001)
    assert cmd is None and "cap" in decision.blocked
    p2 = policy(tmp_path=tmp_path, max_job_share=1.0, breaker_share=0.3)
    p2.decide(evict("n001"), 1000)
    p2.decide(evict("n002"), 1001)  # 2 of 4 > 30 %: trips
    decision, cmd = p2.decide(evict("n003"), 1002)
    assert cmd is None and "breaker" in decision.blocked
    # non-evicting remedies still go out while the breaker is open
    d = Diagnosis(job="j", ts=1003, onset=1003, fault="user_code", action="rollback")
    assert p2.decide(d, 1003)[1].action == "rollback"


def test_capture_stacks_addresses_every_node_of_the_job():
    d = Diagnosis(job="j", ts=1, onset=1, fault="job_hang", action="capture_stacks", nodes=("n003",), ranks=(3,))
    _, cmd = policy().decide(d, 1000)
    assert cmd.action == "capture_stacks" and cmd.nodes == tuple(NODES) and cmd.ranks == ()
    assert cmd.params["suspects"] == ["n003"]


def test_pool_shortfall_is_reported_in_the_command():
    p = policy(max_job_share=1.0)
    p.pools["j"].spares.clear()
    _, cmd = p.decide(evict("n002"), 1000)
    assert cmd.params["replacements"] == [] and cmd.params["standby_shortfall"] == 1


def test_stack_capture_is_folded_only_over_the_settle_time():
    p = policy()
    d = lambda ts: Diagnosis(job="j", ts=ts, onset=ts, fault="job_hang", action="capture_stacks")  # noqa: E731
    assert p.decide(d(1000), 1000)[1] is not None
    assert p.decide(d(1010), 1010)[1] is None  # the same stall reported twice
    assert p.decide(d(1100), 1100)[1] is not None  # a new stall after a restart gets its stacks


def test_the_rounds_of_a_fail_slow_campaign_are_each_captured():
    # diagnosis/peers/failslow.py asks for its stack rounds 10 s apart, each with an id of its own
    p = policy()

    def round_(k, ts):
        return Diagnosis(id=f"d-fs.round{k}", job="j", ts=ts, onset=900.0, fault="fail_slow",
                         action="capture_stacks", nodes=tuple(NODES), confidence=0.3,
                         detail=f"stack round {k}/5: capture every rank's stack")

    sent = [p.decide(round_(k, 1000.0 + 10 * k), 1000.0 + 10 * k)[1] for k in range(1, 6)]
    assert all(cmd is not None and cmd.action == "capture_stacks" for cmd in sent)
    assert len({cmd.id for cmd in sent}) == 5
    # a redelivered copy of the last round, a second later, is still folded
    assert p.decide(round_(5, 1050.0), 1051.0)[1] is None
    # and a suspicion that is not a round keeps the settle-time fold
    suspicion = Diagnosis(id="d-fs", job="j", ts=1060.0, onset=900.0, fault="fail_slow", action="capture_stacks",
                          nodes=("n002",), confidence=0.7)
    assert p.decide(suspicion, 1060.0)[1] is None
