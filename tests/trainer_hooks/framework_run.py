"""A framework's job under `faultlens run` end to end, for test_lightning_faultlens_run.py and
test_hf_trainer_faultlens_run.py: two DDP ranks (gloo, CPU) of a worker that trains with the framework's
FaultlensCallback, one agent, the embedded broker. The callback publishes the job's groups (DDP:
data parallel only, said on stderr) after the launcher's placement. A checkpoint command is saved once, at one step,
by both ranks through the framework; a rollback naming the first of two checkpoints restarts the
workers in place and both resume from it; a stop ends the agent with its documented code."""

from __future__ import annotations

import os
import sys
import uuid
from itertools import pairwise

from faultlens.streams.broker import free_port
from faultlens.trainer_hooks.exit_codes import STOPPED
from tests.progress import files_size, wait_until
from tests.trainer_hooks.callback_script import KEY, command, records, send, steps
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT, Agent

STALL_S = 120.0  # the job printed or logged nothing for this long: it is stuck, not slow


def moved(agent: Agent) -> tuple[int, int]:
    """What a moving job changes: its lines (agent's and workers') and its log."""
    return len(agent.lines), files_size(agent.log)


def line(agent: Agent, predicate, what: str) -> dict:
    """The agent's first line that ``predicate`` holds for, waited for while the job moves
    (a loaded 2-core machine starts torch and a framework in tens of seconds per process)."""
    def found():
        return next((entry for entry in list(agent.lines) if predicate(entry)), None)
    return wait_until(found, progress=lambda: moved(agent), stall_s=STALL_S, what=f"{agent.node}: {what}",
                      explain=agent.story)


def rank_steps(published: list[dict], rank: int) -> list[int]:
    return [s["step"] for s in published if s["rank"] == rank]


def resumed_at(numbers: list[int], step: int) -> bool:
    """The rank went back: ``step`` follows a later step."""
    return any(b == step and a > step for a, b in pairwise(numbers))


def checkpoint_rollback_stop(kafka_settings, tmp_path, worker: str) -> None:
    """The story of the module docstring, with ``worker`` (a module) as the job's training script."""
    job = f"{worker.rsplit('.', 1)[-1]}-{uuid.uuid4().hex[:8]}"
    public = tmp_path / "verify.pem"
    public.write_bytes(KEY.public_pem())
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    argv = [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000",
            "--bootstrap", kafka_settings.bootstrap, "--verify-key", str(public), "--state-dir", str(tmp_path / "state"),
            "--grace", "20", "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", job, "--monitor-interval", "0.2",
            "-m", worker, "--root", str(tmp_path / "run")]
    agent = Agent("n000", argv, env, tmp_path / "agent.log")
    try:
        for rank in (0, 1):
            line(agent, lambda line, r=rank: line.get("worker") == "started" and line["rank"] == r, f"rank {rank} started")
        steps(kafka_settings, job, lambda found: len({s["rank"] for s in found}) == 2, lambda: moved(agent))
        # The callback's topology after the launcher's (before the first step): DDP names no other
        # groups, so data parallel only, and the trainer's stderr says so.
        placed = records(kafka_settings, "jobs", job, "topology", lambda found: len(found) >= 2)
        assert [(t.data["tp"], t.data["pp"], t.data["dp"]) for t in placed] == [(1, 1, 2), (1, 1, 2)]
        assert "names no tensor or pipeline groups: data parallel only" in agent.log.read_text()

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
        restart = line(agent, lambda line: line.get("event") == "restart" and line.get("command_id") == rollback.id,
                       "restart on the rollback")
        assert restart["checkpoint"] == named
        for rank in (0, 1):
            again = line(agent, lambda line, r=rank: line.get("worker") == "started" and line["rank"] == r
                         and line["attempt"] == restart["attempt"], f"rank {rank} restarted")
            assert again["resumed"] == named
        def went_back(found):
            return all(resumed_at(rank_steps(found, r), at + 1) for r in (0, 1))
        published = steps(kafka_settings, job, went_back, lambda: moved(agent))
        assert went_back(published), "the ranks did not both go back to the checkpoint's next step"

        send(kafka_settings, command(job, "stop"))
        wait_until(lambda: agent.proc.poll() is not None, progress=lambda: moved(agent), stall_s=STALL_S,
                   what="the agent's exit after the stop", explain=agent.story)
        assert agent.proc.returncode == STOPPED
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{agent.story()}") from None
    finally:
        agent.stop()
