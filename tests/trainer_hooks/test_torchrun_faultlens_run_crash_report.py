"""A crash under `faultlens run` is diagnosed with no node agent (issue 58): one agent, two gloo
ranks on CPU, the embedded broker. Rank 0 raises a CUDA-like RuntimeError mid-run; the agent
prints the worker's exit (rank, code, the exception) and publishes what it read of it as the node
agent would have read torchrun's output; the real diagnosis engine, given the job's topic records,
names the CUDA error on the rank's node. The job then restarts as torchrun would and finishes."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from faultlens.diagnosis.engine.core import Engine
from faultlens.events.envelope import decode
from faultlens.events.signing import write_key_pair
from faultlens.streams.broker import free_port
from tests.kafka_fixtures import job_records, wait_for_records
from tests.progress import files_size, wait_until
from tests.trainer_hooks.elastic_worker import CUDA_ERROR
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT, Agent

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(60)]

STALL_S = 120.0  # printed, logged and checkpointed nothing for this long: stuck, not slow


def test_torchrun_worker_crash_is_reported_and_diagnosed_without_a_node_agent(kafka_settings, tmp_path):
    job = f"crashrep-{uuid.uuid4().hex[:8]}"
    _, public = write_key_pair(tmp_path / "keys")
    ckpt, control = tmp_path / "ckpt", tmp_path / "control"
    ckpt.mkdir()
    control.mkdir()
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    argv = [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000",
            "--bootstrap", kafka_settings.bootstrap, "--verify-key", str(public), "--state-dir", str(tmp_path / "state"),
            "--crash-wait", "1", "--heartbeat-interval", "0.5", "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", job, "--max-restarts", "1",
            "--monitor-interval", "0.2",
            "-m", "tests.trainer_hooks.elastic_worker", "--ckpt-dir", str(ckpt), "--control", str(control)]
    agent = Agent("n000", argv, env, tmp_path / "agent.log")

    def moved():
        return len(agent.lines), files_size(agent.log), len(list(ckpt.glob("step_*.pt")))

    try:
        agent.wait_for(lambda line: line.get("worker") == "started" and line["rank"] == 1, "rank 1 started")
        wait_until(lambda: list(ckpt.glob("step_*.pt")), progress=moved, stall_s=STALL_S, what="a checkpoint",
                   explain=agent.story)
        (control / "crash-n000").touch()  # the node's first rank (rank 0) raises at its next step
        exit_line = agent.wait_for(lambda line: line.get("event") == "worker_exit" and line["rank"] == 0, "rank 0's exit")
        assert exit_line["exit_code"] == 1 and exit_line["signal"] is None
        assert exit_line["error"] == f"RuntimeError: {CUDA_ERROR}"
        # torch's own restart after the crash wait, then the end
        agent.wait_for(lambda line: line.get("worker") == "started" and line["attempt"] == 1, "the restart")
        (control / "finish").touch()
        wait_until(lambda: agent.proc.poll() is not None, progress=moved, stall_s=STALL_S, what="the end",
                   explain=agent.story)
        assert agent.proc.returncode == 0, agent.story()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{agent.story()}") from None
    finally:
        agent.stop()

    reported = wait_for_records(kafka_settings, "telemetry.nccl", decode, job,
                                lambda rs: any(e.data.get("rank") == 0 for e in rs), timeout_s=STALL_S)
    mine = [e for e in reported if e.data.get("rank") == 0]
    assert {e.node for e in mine} == {"n000"} and any(e.data.get("fault") == "cuda_error" for e in mine)
    # The real engine over the job's placement and what the agent reported: the CUDA error, on n000.
    engine = Engine()
    placement = [e for e in job_records(kafka_settings, "jobs", decode, job, idle_s=0.3) if e.kind == "topology"]
    found = [d for e in sorted([*placement, *reported], key=lambda e: e.ts) for d in engine.process(e)] + engine.flush()
    cuda = [d for d in found if d.fault == "cuda_error"]
    assert cuda and cuda[0].nodes == ("n000",), found
    # The agent beat for its node all along (a hang is told from steps stopping while beats go on),
    # listing live workers, and said its last beat was a deliberate stop.
    beats = [e.data for e in job_records(kafka_settings, "telemetry.heartbeat", decode, job, idle_s=0.3)]
    assert beats and any(len(b["pids"]) == 2 for b in beats) and beats[-1].get("stopping") is True
    assert all(b["sources"] == {"faultlens-run": "ok"} for b in beats)
