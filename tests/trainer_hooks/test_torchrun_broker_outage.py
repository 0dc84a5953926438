"""The operator side never stops training (issue 58): a real `faultlens run` job (one gloo worker
on CPU, the hook in its loop) trains to its end with the broker killed (SIGKILL) mid-run and
brought back, then stopped (SIGTERM) and brought back again, and with no broker at all. The
workers' telemetry is spooled meanwhile and reaches the broker once it is back; nothing prints a
traceback.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from faultlens.events.envelope import decode
from faultlens.events.signing import write_key_pair
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker, free_port
from faultlens.streams.config import KafkaSettings
from tests.kafka_fixtures import wait_for_records
from tests.progress import files_size, wait_until
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT, Agent

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(60)]

STALL_S = 120.0  # the job printed, logged and checkpointed nothing for this long: stuck, not slow


def checkpoints(ckpt: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in ckpt.glob("step_*.pt"))


def start_job(tmp_path: Path, bootstrap: str, job: str) -> tuple[Agent, Path, Path]:
    ckpt, control = tmp_path / "ckpt", tmp_path / "control"
    ckpt.mkdir()
    control.mkdir()
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    _, public = write_key_pair(tmp_path / "keys")
    argv = [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000", "--bootstrap", bootstrap,
            "--verify-key", str(public),
            "--state-dir", str(tmp_path / "state"), "--nnodes", "1", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", job,
            "--monitor-interval", "0.2",
            "-m", "tests.trainer_hooks.elastic_worker", "--ckpt-dir", str(ckpt), "--control", str(control),
            "--step-sleep", "0.05"]
    return Agent("n000", argv, env, tmp_path / "agent.log"), ckpt, control


def moved(agent: Agent, ckpt: Path) -> tuple[int, int, int]:
    return len(agent.lines), files_size(agent.log), len(checkpoints(ckpt))


def finish(agent: Agent, ckpt: Path, control: Path) -> None:
    """The job's end on request: exit code 0, the end line, no traceback anywhere in its output."""
    (control / "finish").touch()
    wait_until(lambda: agent.proc.poll() is not None, progress=lambda: moved(agent, ckpt), stall_s=STALL_S,
               what="the job's end", explain=agent.story)
    assert agent.proc.returncode == 0, agent.story()
    assert agent.wait_for(lambda line: line.get("event") == "end", "end")["reason"] == "finished"
    assert "Traceback" not in agent.log.read_text(errors="replace"), agent.story()


def outage(broker: EmbeddedBroker, settings: KafkaSettings, agent: Agent, ckpt: Path, job: str, how: str) -> None:
    """The broker killed (SIGKILL: no goodbye to any client) or stopped (SIGTERM: it closes its
    connections) mid-run, three checkpoints trained without it, then brought back on its port,
    empty (memory storage): every step trained meanwhile arrives, spooled by the hook."""
    said = agent.log.read_text(errors="replace").count("faultlens telemetry: broker lost")
    if how == "killed":
        broker.proc.kill()
    else:
        broker.proc.terminate()
    broker.proc.wait()
    broker.proc = None
    # Checkpoint k is written before step k is published: step before+5 (its checkpoint not yet
    # written when the broker was gone) was published during the outage.
    before = checkpoints(ckpt)[-1] + 5
    # The worker's hook finds it gone (one warning an outage) and training goes on: three more
    # checkpoints (15 steps) after that, while no broker answers.
    wait_until(lambda: agent.log.read_text(errors="replace").count("faultlens telemetry: broker lost") > said,
               progress=lambda: moved(agent, ckpt), stall_s=STALL_S, what=f"the hook's word of the outage ({how})",
               explain=agent.story)
    before = max(before, checkpoints(ckpt)[-1] + 5)
    wait_until(lambda: len([s for s in checkpoints(ckpt) if s >= before]) >= 3,
               progress=lambda: moved(agent, ckpt), stall_s=STALL_S, what=f"steps during the outage ({how})",
               explain=agent.story)
    during = checkpoints(ckpt)[-1]

    broker.start()  # same port, empty (memory storage): what arrives now was spooled or is new
    ensure_topics(settings)

    def step_numbers(records) -> set[int]:
        return {e.data["step"] for e in records if e.kind == "step"}

    found = wait_for_records(settings, "telemetry.train", decode, job,
                             lambda rs: set(range(before, during + 1)) <= step_numbers(rs), timeout_s=STALL_S,
                             progress=lambda rs: (len(rs), *moved(agent, ckpt)))
    steps = step_numbers(found)
    # Every step trained during the outage arrived, in order, once the broker was back.
    assert set(range(before, during + 1)) <= steps, (how, sorted(steps))


def test_torchrun_job_trains_through_a_broker_killed_then_stopped_mid_run(tmp_path):
    """One job, two outages in turn (SIGKILL, then SIGTERM): each was a job of its own, the same
    checks; one job's processes (agent, worker, torch) serve both."""
    job = f"outage-{uuid.uuid4().hex[:8]}"
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    settings = KafkaSettings(bootstrap=broker.bootstrap)
    ensure_topics(settings)
    agent, ckpt, control = start_job(tmp_path, broker.bootstrap, job)
    try:
        agent.wait_for(lambda line: line.get("worker") == "started", "worker started")
        wait_until(lambda: len(checkpoints(ckpt)) >= 2, progress=lambda: moved(agent, ckpt), stall_s=STALL_S,
                   what="checkpoints before the outage", explain=agent.story)
        for how in ("killed", "stopped"):
            outage(broker, settings, agent, ckpt, job, how)
        finish(agent, ckpt, control)
    finally:
        agent.stop()
        broker.stop()


def test_torchrun_job_trains_with_no_broker_at_all(tmp_path):
    job = f"nobroker-{uuid.uuid4().hex[:8]}"
    agent, ckpt, control = start_job(tmp_path, f"127.0.0.1:{free_port()}", job)  # nothing listens there
    try:
        agent.wait_for(lambda line: line.get("worker") == "started", "worker started")
        wait_until(lambda: len(checkpoints(ckpt)) >= 2, progress=lambda: moved(agent, ckpt), stall_s=STALL_S,
                   what="training with no broker", explain=agent.story)
        finish(agent, ckpt, control)
        assert "KafkaTimeoutError" not in agent.log.read_text(errors="replace")
    finally:
        agent.stop()
