"""The Lightning callback publishes the job's real parallel groups (issue 58): a ModelParallelStrategy
job, two ranks on CPU (gloo) split by tensor parallelism, under `faultlens run` on the embedded
broker. `faultlens run` publishes the rendezvous' placement (data parallel, dp=2); the callback's
topology, sent after, names the tensor-parallel group the two ranks share (tp=2, dp=1), so a hang
is localised to that group. Every step also carries the trainer's word that the weights began
random (``from_scratch``), which the stalled-loss diagnosis needs to call a run one that never learned."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid

import pytest

from faultlens.events.envelope import decode
from faultlens.events.topology import Topology
from faultlens.streams.broker import free_port
from tests.kafka_fixtures import job_records
from tests.progress import files_size, wait_until
from tests.trainer_hooks.callback_script import KEY
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT, Agent

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(60),
              pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                 reason="Lightning is not installed (pip install 'faultlens[lightning]')")]

STALL_S = 120.0  # printed and logged nothing for this long: stuck, not slow


def test_lightning_model_parallel_job_publishes_its_tensor_parallel_group(kafka_settings, tmp_path):
    job = f"tp-{uuid.uuid4().hex[:8]}"
    public = tmp_path / "verify.pem"
    public.write_bytes(KEY.public_pem())
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    argv = [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000",
            "--bootstrap", kafka_settings.bootstrap, "--verify-key", str(public), "--state-dir", str(tmp_path / "state"),
            "--heartbeat-interval", "0", "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", job, "--monitor-interval", "0.2",
            "-m", "tests.trainer_hooks.model_parallel_worker", "--root", str(tmp_path / "run"), "--tp", "2"]
    agent = Agent("n000", argv, env, tmp_path / "agent.log")
    try:
        wait_until(lambda: agent.proc.poll() is not None, progress=lambda: (len(agent.lines), files_size(agent.log)),
                   stall_s=STALL_S, what="the job's end", explain=agent.story)
        assert agent.proc.returncode == 0, agent.story()
    finally:
        agent.stop()

    placed = [Topology.from_data(e.data) for e in job_records(kafka_settings, "jobs", decode, job) if e.kind == "topology"]
    assert len(placed) == 2, placed  # the launcher's, then the callback's
    launcher, trainer = placed
    assert (launcher.tp, launcher.pp, launcher.dp) == (1, 1, 2)
    assert (trainer.tp, trainer.pp, trainer.dp) == (2, 1, 1)
    assert [(p.rank, p.node, p.tp, p.dp) for p in trainer.ranks] == [(0, "n000", 0, 0), (1, "n000", 1, 0)]
    assert trainer.group_ranks("tp", trainer.group_id(1, "tp")) == (0, 1)  # one group: a hang blames both ranks' group
    assert "parallel groups from Lightning ModelParallelStrategy device mesh (data_parallel=1, tensor_parallel=2)" \
        in agent.log.read_text()

    steps = [e.data for e in job_records(kafka_settings, "telemetry.train", decode, job) if e.kind == "step"]
    assert {s["rank"] for s in steps} == {0, 1} and len(steps) == 2 * 3
    assert all(s["from_scratch"] is True for s in steps)
