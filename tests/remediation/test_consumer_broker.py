"""The remediation consumer group on the real broker: diagnoses in, signed commands out."""

import json
import os
import sys
import time
import uuid

import orjson
import pytest

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.remediation.consumer import DECODERS, RemediationHandler
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig
from faultlens.streams.producer import Producer
from faultlens.streams.reader import read_topic
from faultlens.streams.runner.loop import GroupRunner
from tests.kafka_fixtures import job_records
from tests.progress import run_watched  # waits while it prints or computes (issue 47)

pytestmark = pytest.mark.broker
KEY = SigningKey.generate()


def machine(job: str, i: int) -> str:
    """A node name of this job alone: the policy's fleet memory counts a machine's faults across
    jobs, and another test's gpu_lost on an "n001" of the same broker once made this one a lemon."""
    return f"{job}-n{i:03d}"


def publish(settings, job, diagnoses, raw=(), bad_topology=False):
    topo = Topology.grid([machine(job, i) for i in range(4)], 1, 1, 2, 2).to_event(job, time.time())
    with Producer(settings) as p:
        if bad_topology:
            p.send_event(Envelope(ts=time.time(), job=job, node="-", source="job", kind="topology", data={"tp": 0}))
        p.send_event(topo)
        for d in diagnoses:
            p.send("diagnoses", job.encode(), d.encode())
        for r in raw:
            p.send("diagnoses", job.encode(), r)
        p.flush()


def commands_for(settings, job):
    out = job_records(settings, "commands", Command.decode, job)
    return out


def test_group_turns_diagnoses_into_signed_commands_and_dead_letters_garbage(kafka_settings, group_name, tmp_path):
    job = f"rem-{uuid.uuid4().hex[:8]}"
    hw = Diagnosis(job=job, ts=time.time(), onset=time.time(), fault="gpu_lost", action="evict",
                   nodes=(machine(job, 1),))
    nan = Diagnosis(job=job, ts=time.time(), onset=time.time(), fault="nan_loss", action="stop_time_diagnosis")
    publish(kafka_settings, job, [hw, hw, nan], raw=[f"not a diagnosis {job}".encode(), f'{{"id": "{job}"}}'.encode()],
            bad_topology=True)
    policy = Policy(KEY, PolicyConfig(act_on=frozenset({job})),
                    Safety(SafetyConfig(max_job_share=0.5, breaker_share=0.9), CircuitBreaker(tmp_path / "b.json")))
    handler = RemediationHandler(policy, decision_log=tmp_path / "decisions.jsonl", group=group_name)
    runner = GroupRunner(kafka_settings, group_name, ["diagnoses", "jobs"], handler, DECODERS)
    runner.run(idle_stop_s=2.0, handle_signals=False)

    cmds = commands_for(kafka_settings, job)
    assert sorted(c.action for c in cmds) == ["evict", "rollback"]  # the duplicate diagnosis made no 2nd command
    assert all(c.verify(KEY.verify_keys()) for c in cmds)
    evict = next(c for c in cmds if c.action == "evict")
    assert evict.nodes == (machine(job, 1),) and evict.diagnosis_id == hw.id
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [line["action"] for line in lines if line["job"] == job] == ["evict", "rollback"]  # redelivered id skipped
    dead = [orjson.loads(m.value) for m in read_topic(kafka_settings, "dead-letter", idle_s=0.5, timeout_s=120)]
    mine = [d for d in dead if d.get("group") == group_name and job in (d.get("value") or "")]
    assert len(mine) == 3 and sum("bad topology" in d["reason"] for d in mine) == 1


def test_cli_is_observe_only_by_default_and_breaker_reset_works(kafka_settings, tmp_path):
    job = f"rem-{uuid.uuid4().hex[:8]}"
    d = Diagnosis(job=job, ts=time.time(), onset=time.time(), fault="user_code", action="rollback")
    publish(kafka_settings, job, [d])
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path)}
    env.pop("FAULTLENS_SIGNING_KEY", None)  # observe-only needs no key: it signs with an ephemeral one
    cli = [sys.executable, "-m", "faultlens"]
    out = run_watched([*cli, "remediate", "--bootstrap", kafka_settings.bootstrap, "--idle-stop", "2",
                       "--group", f"g-{job}"], env=env, stall_s=60, cpu=True, limit_s=280)
    assert out.returncode == 0, out.stderr
    assert "ephemeral command-signing key" in out.stderr
    mine = [json.loads(line) for line in out.stdout.splitlines() if json.loads(line)["job"] == job]
    assert len(mine) == 1 and mine[0]["mode"] == "observe" and mine[0]["sent"] is False and mine[0]["action"] == "rollback"
    assert commands_for(kafka_settings, job) == []

    CircuitBreaker(tmp_path / "remediation-breaker.json").trip(1.0, "test")
    status = run_watched([*cli, "remediate", "--status"], env=env, stall_s=60, cpu=True, limit_s=280)
    assert json.loads(status.stdout)["breaker"] == "open"
    assert run_watched([*cli, "remediate", "--reset"], env=env, stall_s=60, cpu=True, limit_s=280).returncode == 0
    assert not CircuitBreaker(tmp_path / "remediation-breaker.json").open


def test_a_restarted_consumer_climbs_the_ladder_where_the_last_one_stopped(kafka_settings, group_name, tmp_path):
    """Stop the remediation consumer after a crash's first diagnosis, start a new one on the same
    state file: the crash's second diagnosis climbs to rollback instead of reattempting again."""
    from faultlens.remediation.consumer import build_policy, remediate_consumer

    job = f"rem-{uuid.uuid4().hex[:8]}"
    state, t0 = tmp_path / "remediation-state.json", time.time()
    config = PolicyConfig(act_on=frozenset({job}))

    def run_once(diagnosis):
        publish(kafka_settings, job, [diagnosis])
        policy = build_policy(KEY, config, SafetyConfig(), tmp_path / "b.json", state)
        runner, handler = remediate_consumer(kafka_settings, policy, group=group_name)
        runner.run(idle_stop_s=2.0, handle_signals=False)
        return [d for d in handler.decisions if d.job == job]

    first = run_once(Diagnosis(job=job, ts=t0, onset=t0, fault="cuda_error", action="stop_time_diagnosis"))
    assert [d.rung for d in first] == ["reattempt"]
    second = run_once(Diagnosis(job=job, ts=t0 + 120, onset=t0 + 120, fault="cuda_error", action="stop_time_diagnosis"))
    assert [d.rung for d in second] == ["rollback"]  # the first diagnosis was committed, not decided again
    assert sorted(c.action for c in commands_for(kafka_settings, job)) == ["reattempt", "rollback"]
