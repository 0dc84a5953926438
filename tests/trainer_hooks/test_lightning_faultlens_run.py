"""A Lightning job under `faultlens run` end to end: two DDP ranks (gloo, CPU) with the
FaultlensCallback, one agent, the embedded broker. A checkpoint command is saved once, at one step,
by both ranks through Lightning; a rollback naming the first checkpoint restarts the workers in
place and they resume from it; a stop ends the agent with its documented code."""

from __future__ import annotations

import os
import sys
import uuid
from itertools import pairwise

import pytest

pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (pip install 'faultlens[lightning]')")

from faultlens.streams.broker import free_port
from faultlens.streams.producer import Producer
from faultlens.trainer_hooks.exit_codes import STOPPED
from tests.trainer_hooks.callback_script import KEY, command, records, steps
from tests.trainer_hooks.test_faultlens_run_broker import HANG_GUARD_S, ROOT, Agent

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(90)]


def send(settings, cmd) -> None:
    with Producer(settings) as p:
        p.send("commands", cmd.job.encode(), cmd.encode())
        p.flush()


def rank_steps(published: list[dict], rank: int) -> list[int]:
    return [s["step"] for s in published if s["rank"] == rank]


def resumed_at(numbers: list[int], step: int) -> bool:
    """The rank went back: ``step`` follows a later step."""
    return any(b == step and a > step for a, b in pairwise(numbers))


def test_lightning_job_checkpoints_rolls_back_and_stops_under_faultlens_run(kafka_settings, tmp_path):
    job = f"lrun-{uuid.uuid4().hex[:8]}"
    public = tmp_path / "verify.pem"
    public.write_bytes(KEY.public_pem())
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    argv = [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000",
            "--bootstrap", kafka_settings.bootstrap, "--verify-key", str(public), "--state-dir", str(tmp_path / "state"),
            "--grace", "20", "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", job, "--monitor-interval", "0.2",
            "-m", "tests.trainer_hooks.lightning_worker", "--root", str(tmp_path / "run")]
    agent = Agent("n000", argv, env, tmp_path / "agent.log")
    try:
        for rank in (0, 1):
            agent.wait_for(lambda l, r=rank: l.get("worker") == "started" and l["rank"] == r, f"rank {rank} started")
        steps(kafka_settings, job, lambda found: len({s["rank"] for s in found}) == 2)

        first, second = command(job, "checkpoint"), command(job, "checkpoint")
        send(kafka_settings, first)
        saved = records(kafka_settings, "telemetry.train", job, "checkpoint", lambda found: len(found) >= 1)
        send(kafka_settings, second)
        saved = records(kafka_settings, "telemetry.train", job, "checkpoint", lambda found: len(found) >= 2)
        assert len(saved) == 2 and {e.data["rank"] for e in saved} == {0}  # one save per command, by rank 0
        named, at = saved[0].data["path"], saved[0].data["step"]
        assert os.path.exists(named) and saved[1].data["step"] > at

        rollback = command(job, "rollback", checkpoint=named)
        send(kafka_settings, rollback)
        restart = agent.wait_for(lambda l: l.get("event") == "restart" and l.get("command_id") == rollback.id,
                                 "restart on the rollback")
        assert restart["checkpoint"] == named
        for rank in (0, 1):
            again = agent.wait_for(lambda l, r=rank: l.get("worker") == "started" and l["rank"] == r
                                   and l["attempt"] == restart["attempt"], f"rank {rank} restarted")
            assert again["resumed"] == named
        published = steps(kafka_settings, job, lambda found: all(resumed_at(rank_steps(found, r), at + 1) for r in (0, 1)))
        assert all(resumed_at(rank_steps(published, r), at + 1) for r in (0, 1)), "no rank went back to the checkpoint"

        send(kafka_settings, command(job, "stop"))
        assert agent.proc.wait(HANG_GUARD_S) == STOPPED
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{agent.story()}") from None
    finally:
        agent.stop()
