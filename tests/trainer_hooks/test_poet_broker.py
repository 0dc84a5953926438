"""The reference trainer under --optimizer poet, launched on the embedded broker: the hook's
checkpoint command and a rollback work as they do with --optimizer adamw (the same test runs
both), and the steps rerun after the rollback reproduce the first attempt's losses (a POET
checkpoint holds W0, R, P and the permutations drawn). The trainer says its first start began
from random weights and its resumed one did not (``from_scratch``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict

import pytest

from faultlens.events import topics
from faultlens.events.command import Command
from faultlens.events.envelope import as_float, decode
from faultlens.events.signing import SigningKey, write_key_pair
from faultlens.streams.producer import Producer
from tests.kafka_fixtures import job_records
from tests.trainer_hooks.launcher_lines import follow, until
from tests.trainer_hooks.torch_lazy import needs_torch

pytestmark = [pytest.mark.broker, needs_torch]


def _wait_file(path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def _train_events(settings, job):
    return job_records(settings, topics.TRAIN, decode, job)


@pytest.mark.parametrize("optimizer", ["adamw", "poet"])
def test_job_obeys_checkpoint_and_rollback_and_reruns_the_same_losses(kafka_settings, tmp_path, optimizer):
    job = f"{optimizer}-{uuid.uuid4().hex[:8]}"
    key = SigningKey.generate()
    _, public = write_key_pair(tmp_path / "keys", key)
    ckpt = tmp_path / "ckpt"
    env = {**os.environ, "FAULTLENS_BOOTSTRAP": kafka_settings.bootstrap, "FAULTLENS_STATE_DIR": str(tmp_path / "state"),
           "FAULTLENS_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultlens.trainer_hooks.launcher", "--job", job, "--nodes", "1", "--verify-key", str(public),
         "--command-wait", "1", "--grace", "2", "--crash-wait", "5",
         "--", "--ckpt-dir", str(ckpt), "--steps", "40", "--ckpt-every", "5", "--step-sleep", "0.1",
         "--optimizer", optimizer, "--lr", "1e-2", "--poet-merge-every", "4"],
        env=env, stdout=subprocess.PIPE, text=True)
    lines = follow(proc)
    seen: list = []

    def command(action: str) -> Command:
        now = time.time()
        return Command(job=job, action=action, issued_at=now, expires_at=now + 60).signed(key)

    producer = Producer(kafka_settings)
    try:
        until(lines, "start", 30, seen)
        _wait_file(ckpt / "step_000010.pt", 60)
        asked = command("checkpoint")
        producer.send(topics.COMMANDS, job.encode(), asked.encode())
        producer.flush()
        time.sleep(1.0)
        rollback = command("rollback")
        producer.send(topics.COMMANDS, job.encode(), rollback.encode())
        producer.flush()

        restart = until(lines, "restart", 60, seen)
        assert restart["action"] == "rollback" and restart["resume"] == "rollback" and restart["nodes_out"] == []
        assert restart["command_id"] == rollback.id
        assert until(lines, "done", 90, seen)["exit"] == 0
        assert proc.wait(30) == 0
    finally:
        producer.close()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)

    events = _train_events(kafka_settings, job)
    acks = {e.data["command_id"]: e.data for e in events if e.kind == "command_ack"}
    assert acks[asked.id]["obeyed"] is True and acks[rollback.id]["obeyed"] is True
    saved = [e.data["step"] for e in events if e.kind == "checkpoint"]
    assert any(s % 5 for s in saved), f"no checkpoint written on command: {saved}"

    losses: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e.kind == "step":
            losses[e.data["step"]].append(as_float(e.data["loss"]))
    # The trainer's word for the stalled-loss diagnosis: random weights at first, a checkpoint's after the rollback.
    stepped = [(e.data["step"], e.data.get("from_scratch")) for e in events if e.kind == "step"]
    back = next(i for i in range(1, len(stepped)) if stepped[i][0] <= stepped[i - 1][0])
    assert {word for _, word in stepped[:back]} == {True} and {word for _, word in stepped[back:]} == {False}
    rerun = {s: v for s, v in losses.items() if len(v) > 1}
    assert rerun, "the rollback reran no step"
    assert all(v[0] == v[1] for v in rerun.values()), rerun
    assert sorted(losses) == list(range(1, 41))
    assert sum(losses[40]) / len(losses[40]) < 0.5 * losses[1][0]
