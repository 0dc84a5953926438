"""A node agent that refuses `run_checks` (here: it trusts a stale key) answers with a
`check`/`command_ack` (collectors.command_ack); the stop-time wait stops waiting for that machine
and reports it to a person, never evicting it: a refusal says nothing about its hardware."""

from __future__ import annotations

from faultlens.collectors.checks.source import ChecksSource
from faultlens.events.signing import SigningKey
from faultlens.streams.config import KafkaSettings
from tests.remediation.test_stop_checks import KEY, NODES, crash, policy, result

STALE = SigningKey.generate()  # the key n001's agent still trusts


def _agent(node: str, keys, out: list) -> ChecksSource:
    return ChecksSource(KafkaSettings(bootstrap="127.0.0.1:1"), keys=keys, job="j", node=node, publish=out.append)


def test_a_refusal_ends_the_wait_for_that_machine_and_evicts_nobody():
    p = policy()
    _, cmd = p.decide(crash(), 1000.0)
    published: list = []
    screened = _agent("n001", STALE.verify_keys(), published).listener.dispatch(cmd.encode(), now=1000.5)
    assert not screened.obey and screened.reason.startswith("signed with unknown key")
    [ack] = published
    assert (ack.source, ack.kind, ack.job, ack.node) == ("check", "command_ack", "j", "n001")
    assert ack.data == {"rank": None, "command_id": cmd.id, "action": "run_checks", "obeyed": False,
                        "reason": screened.reason, "addressed": True}
    out = []
    for n in ("n000", "n002", "n003"):
        out += p.observe_check(result(n, cmd.id, 1010.0), 1010.0)
    assert out == []  # n001 is still awaited
    out = p.observe_check(ack, 1011.0)
    assert [d.rung for d, _ in out] == ["checks_unclear", "reattempt"]
    assert not any(c is not None and c.action == "evict" for _, c in out)
    unclear, (_, reattempt) = out[0][0], out[1]
    assert unclear.nodes == ("n001",) and "refused run_checks: signed with unknown key" in unclear.reason
    assert reattempt.params["suspects"] == ["n001"] and reattempt.params["checks_passed"] == ["n000", "n002", "n003"]
    assert "j" not in p.pending_checks


def test_refusals_of_other_requests_or_not_addressed_are_ignored():
    p = policy()
    _, cmd = p.decide(crash(), 1000.0)
    forged = cmd.__class__.from_dict({**cmd.to_dict(), "id": "forged-request"})
    published: list = []
    _agent("n001", KEY.verify_keys(), published).listener.dispatch(forged.encode(), now=1000.5)
    [ack] = published  # a forged request is refused and answered, but it is not one remediation waits on
    assert ack.data["command_id"] == "forged-request" and ack.data["reason"].startswith("bad signature")
    assert p.observe_check(ack, 1001.0) == [] and p.pending_checks["j"].results == {}
    # an ack saying the command was not for this machine is no refusal
    stranger = ack.__class__(ts=ack.ts, job="j", node="n002", source="check", kind="command_ack",
                             data={**ack.data, "command_id": cmd.id, "addressed": False})
    assert p.observe_check(stranger, 1001.0) == [] and p.pending_checks["j"].results == {}
    assert set(p.pending_checks["j"].silent()) == set(NODES)
