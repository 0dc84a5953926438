"""A hang is localised out of the box (issue 58): `faultlens run` alone on one machine (its own
`faultlens up`, no node agent, no topology from the trainer). Rank 1 of two gloo ranks stops before
a collective, rank 0 waits in it. The run's heartbeat says the workers live while their steps stop:
a job_hang suspicion asks for every rank's stacks, the hooks answer (stacks and Flight Recorder),
and the verdict blames rank 1's own group (the topology the rendezvous published), then evicts its
machine: the only one, so the agent leaves with EVICTED (75) for the scheduler to requeue. The hang
floor is `faultlens run --hang-floor`, passed on to the `faultlens up` it starts."""

from __future__ import annotations

import json
import os
import re
import sys
import uuid

import pytest

from faultlens.trainer_hooks.exit_codes import EVICTED
from tests.progress import files_size, wait_until
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT, Agent

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(120),
              pytest.mark.skipif(__import__("importlib").util.find_spec("duckdb") is None, reason="needs faultlens[all]")]

STALL_S = 150.0  # nothing printed or logged for this long, not a speed check
# Passed to the operator side `faultlens run` starts for itself (its engine's --hang-floor): the
# default floor, 60 s, would make the test wait a minute of no steps for the suspicion.
HANG_FLOOR_S = 10
STEPS = 20  # before the hang (hang_worker writes step-RANK every 10)


def test_torchrun_hang_is_pinned_to_the_hung_ranks_group_with_no_node_agent(tmp_path):
    job = f"hang-{uuid.uuid4().hex[:8]}"
    home, control = tmp_path / "home", tmp_path / "control"
    control.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("FAULTLENS_BOOTSTRAP", "FAULTLENS_VERIFY_KEY",
                                                           "FAULTLENS_CONFIG")}
    env.update(FAULTLENS_HOME=str(home), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000", "--heartbeat-interval", "2",
            "--hang-floor", str(HANG_FLOOR_S),
            "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.2",
            "-m", "tests.trainer_hooks.hang_worker", "--control", str(control)]
    agent = Agent("n000", argv, env, tmp_path / "agent.log")
    decisions = home / "remediation-decisions.jsonl"

    def moved():
        logs = [agent.log, home / f"run-{job}-up.log", decisions]
        return len(agent.lines), sum(files_size(p) for p in logs if p.exists())

    try:
        wait_until(lambda: sum(line.get("event") == "workers" for line in agent.lines), progress=moved, stall_s=STALL_S,
                   what="the workers' start", explain=agent.story)
        # Steps first (a job that never stepped has no step time to be late against), then the hang.
        # 20 give the median step time (k x ~0.1 s) far below the 10 s floor, as 100 did: the
        # threshold is the floor either way, and the 80 more steps were only seconds of waiting.
        step = control / "step-1"
        wait_until(lambda: step.exists() and int(step.read_text() or 0) >= STEPS, progress=lambda: (
            moved(), step.read_text() if step.exists() else ""), stall_s=STALL_S, what=f"{STEPS} steps",
            explain=agent.story)
        (control / "hang-1").touch()
        wait_until(lambda: agent.proc.poll() is not None, progress=moved, stall_s=STALL_S,
                   what="the hang's verdict and the agent's exit", explain=agent.story)
        assert agent.proc.returncode == EVICTED, agent.story()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{agent.story()}") from None
    finally:
        agent.stop()
    sent = [json.loads(line) for line in decisions.read_text().splitlines()]
    sent = [d for d in sent if d["job"] == job and d.get("sent")]
    assert [d["action"] for d in sent] == ["capture_stacks", "evict"], sent
    # The suspicion's threshold was the floor given, not the default's 60 s (diagnosis/hang/detector.py's
    # detail, kept in the history the run's own `up` wrote and named on stderr).
    import duckdb

    history = re.search(r"the job's history: (\S+);", agent.log.read_text())
    assert history, agent.story()
    with duckdb.connect(history.group(1), read_only=True) as db:
        [(detail,)] = db.execute("SELECT detail FROM diagnoses WHERE job = ? AND action = 'capture_stacks'", [job]).fetchall()
    threshold = re.search(r"\(threshold (\d+)s\)", detail)
    assert threshold and HANG_FLOOR_S <= int(threshold.group(1)) < 60, detail
    assert sent[1]["fault"] == "job_hang" and sent[1]["nodes"] == ["n000"] and "pp:1" in sent[1]["reason"]
