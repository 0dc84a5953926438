"""A single-machine job adopts faultlens with no operator setup (issue 58): `faultlens run` with no
--bootstrap, no FAULTLENS_BOOTSTRAP and no broker running here starts `faultlens up --act-on JOB`
for itself (embedded broker, diagnosis, remediation, history). Two gloo ranks on CPU: rank 0
raises a CUDA error; the crash is reported, diagnosed and answered by a signed command, which
restarts the workers well before --crash-wait (600 s) ends; at the end `up` is stopped and the
history and its HTML report are named."""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from tests.progress import files_size, wait_until
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT, Agent

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(120),
              pytest.mark.skipif(__import__("importlib").util.find_spec("duckdb") is None, reason="needs faultlens[all]")]

STALL_S = 120.0  # the job, its agent and its `up` printed and logged nothing for this long: stuck


def test_torchrun_single_machine_job_starts_its_own_operator_side(tmp_path):
    job = f"local-{uuid.uuid4().hex[:8]}"
    home, ckpt, control = tmp_path / "home", tmp_path / "ckpt", tmp_path / "control"
    ckpt.mkdir()
    control.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("FAULTLENS_BOOTSTRAP", "FAULTLENS_VERIFY_KEY",
                                                           "FAULTLENS_CONFIG")}
    env.update(FAULTLENS_HOME=str(home), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000", "--crash-wait", "600",
            "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.2",
            "-m", "tests.trainer_hooks.elastic_worker", "--ckpt-dir", str(ckpt), "--control", str(control)]
    agent = Agent("n000", argv, env, tmp_path / "agent.log")

    def moved():
        up_log = home / f"run-{job}-up.log"
        return len(agent.lines), files_size(agent.log), files_size(up_log) if up_log.exists() else 0

    try:
        wait_until(lambda: any(line.get("worker") == "started" for line in agent.lines), progress=moved, stall_s=STALL_S,
                   what="the workers' start under the job's own up", explain=agent.story)
        wait_until(lambda: list(ckpt.glob("step_*.pt")), progress=moved, stall_s=STALL_S, what="a checkpoint",
                   explain=agent.story)
        (control / "crash-n000").touch()
        restart = wait_until(lambda: next((line for line in agent.lines if line.get("event") == "restart"), None),
                             progress=moved, stall_s=STALL_S, what="a restart on the remediator's command",
                             explain=agent.story)
        assert restart["command_id"] and restart["action"] in ("reattempt", "restart", "rollback"), restart
        wait_until(lambda: any(line.get("worker") == "started" and line["attempt"] == 1 for line in agent.lines),
                   progress=moved, stall_s=STALL_S, what="the workers' restart", explain=agent.story)
        (control / "finish").touch()
        wait_until(lambda: agent.proc.poll() is not None, progress=moved, stall_s=STALL_S, what="the end",
                   explain=agent.story)
        assert agent.proc.returncode == 0, agent.story()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{agent.story()}") from None
    finally:
        agent.stop()
    err = agent.log.read_text(errors="replace")
    assert f"starting `faultlens up --act-on {job}`" in err
    found = re.search(r"the job's history: (\S+); report: file://(\S+)", err)
    assert found, err[-2000:]
    assert Path(found.group(1)).is_file() and Path(found.group(2)).is_file()
    assert not (home / "broker.json").exists()  # its broker stopped with it
