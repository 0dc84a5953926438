"""Dual-phase reproduction end to end on the embedded broker, with the reference trainer on CPU:
the ladder's reproduction rung → the launcher runs each half → the half holding the broken machine
reproduces → the ladder convicts that machine → the launcher restarts without it and finishes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import decode
from faultlens.events.signing import SigningKey, write_key_pair
from faultlens.events.topology import Topology
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.policy import Policy
from faultlens.streams.producer import Producer
from tests.kafka_fixtures import job_records
from tests.trainer_hooks.launcher_lines import follow, until

pytestmark = pytest.mark.broker


@pytest.mark.long(40)
def test_reproduction_convicts_only_the_machine_that_reproduces(kafka_settings, tmp_path):
    job = f"repro-{uuid.uuid4().hex[:8]}"
    key = SigningKey.generate()
    _, public = write_key_pair(tmp_path / "keys", key)
    env = {**os.environ, "FAULTLENS_BOOTSTRAP": kafka_settings.bootstrap, "FAULTLENS_STATE_DIR": str(tmp_path / "state"),
           "FAULTLENS_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultlens.trainer_hooks.launcher", "--job", job, "--nodes", "2", "--standby", "s000",
         "--verify-key", str(public), "--crash-wait", "90", "--command-wait", "2", "--grace", "1",
         "--replay-steps", "2", "--replay-timeout", "90", "--log-dir", str(tmp_path / "logs"),
         "--", "--ckpt-dir", str(tmp_path / "ckpt"), "--steps", "6", "--ckpt-every", "2", "--step-sleep", "0",
         "--bad-node", "n001", "--bad-node-at", "3"],
        env=env, stdout=subprocess.PIPE, text=True)
    lines = follow(proc)
    seen: list = []
    producer = Producer(kafka_settings)
    try:
        until(lines, "crash", 90, seen, watch=[tmp_path])  # n001 breaks at step 3, after the checkpoint of step 2

        # The ladder of a job whose crash kept coming back: reattempt and rollback were tried
        # (not sent here), the third failure climbs to dual-phase reproduction.
        policy = Policy(key, PolicyConfig(act_on=frozenset({job}), settle_s=0.0))
        policy.observe_topology(job, Topology.grid(["n000", "n001"], 1, 1, 1, 2))
        for i in range(3):
            d = Diagnosis(job=job, ts=time.time() + i, onset=time.time(), fault="unknown",
                          action="stop_time_diagnosis", ranks=(1,), confidence=0.6)
            decision, command = policy.decide(d, time.time() + i)
        assert decision.rung == "dual_phase_replay" and command.params["mode"] == "dual_phase_replay"
        producer.send(topics.COMMANDS, job.encode(), command.encode())
        producer.flush()

        done = until(lines, "replay_done", 150, seen, watch=[tmp_path])
        groups = [line for line in seen if line.get("event") == "replay_group"]
        assert [(g["phase"], g["nodes"], g["reproduced"]) for g in groups] == [
            ("horizontal", ["n000", "n001"], True), ("vertical", ["n000"], False), ("vertical", ["n001"], True)]
        assert "injected" not in groups[1]["detail"] and groups[2]["detail"] == "exited n001=1"
        assert done["failing_horizontal"] == [0] and done["failing_vertical"] == [1]

        # The ladder reads the outcome from the bus, as the remediation consumer does.
        events = job_records(kafka_settings, topics.CHECKS, decode, job)
        assert [e.kind for e in events] == ["replay"] * 3 + ["replay_done"]
        [(verdict, evict)] = policy.observe_check(events[-1], time.time())
        assert verdict.rung == "replay_evict" and evict.action == "evict" and evict.nodes == ("n001",)
        producer.send(topics.COMMANDS, job.encode(), evict.encode())
        producer.flush()

        restart = until(lines, "restart", 60, seen, watch=[tmp_path])
        assert restart["action"] == "evict" and restart["nodes"] == ["n000", "s000"]
        assert until(lines, "done", 90, seen, watch=[tmp_path])["exit"] == 0
        assert proc.wait(30) == 0
        # The reproduction runs moved no checkpoint: the job resumed from step 2's and wrote the rest itself.
        assert sorted(p.name for p in (tmp_path / "ckpt").glob("step_*.pt")) == [
            "step_000002.pt", "step_000004.pt", "step_000006.pt"]
    finally:
        producer.close()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
