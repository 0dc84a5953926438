"""`faultlens nodes drain|resume`: the by-hand way to take a machine out or bring it back."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.in_process import faultlens_main
from tests.progress import run_watched  # waits while it prints or computes (issue 47)
from tests.remediation.slurm_fixture import GHOST_NODES


def faultlens(*argv, env=None):
    return run_watched([sys.executable, "-m", "faultlens", "nodes", *argv], env=env or os.environ.copy(), stall_s=60,
                       cpu=True, limit_s=280)


# The two below through main() in this process (tests/in_process.py): the command ends by itself, the
# script actuator's child is still a process; the Slurm and broker tests run `faultlens nodes` as a user does.
def test_nodes_needs_a_scheduler(monkeypatch):
    monkeypatch.setenv("FAULTLENS_ACTUATOR", "")
    r = faultlens_main("nodes", "resume", "n1")
    assert r.returncode == 2 and "--actuator slurm|kubernetes|script" in r.stderr


def test_nodes_exit_status_follows_the_outcome(tmp_path):
    ok = faultlens_main("nodes", "resume", "n1", "n2", "--actuator", "script", "--actuator-command",
                        f"{sys.executable} -c \"import json,sys; r=json.load(sys.stdin); print('back', *r['nodes'])\"")
    rec = json.loads(ok.stdout)
    assert ok.returncode == 0 and (rec["op"], rec["outcome"], rec["detail"]) == ("bring_back", "ok", "back n1 n2")
    bad = faultlens_main("nodes", "drain", "n1", "--actuator", "script", "--actuator-command",
                         f"{sys.executable} -c \"import sys; sys.exit('no such machine')\"")
    rec = json.loads(bad.stdout)
    assert bad.returncode == 1 and rec["outcome"] == "error" and rec["detail"].endswith("no such machine")


def test_slurm_nodes_drain_then_resume_by_hand(slurm_controller):
    cluster = slurm_controller
    node = GHOST_NODES[0]
    drain = faultlens("drain", node, "--actuator", "slurm", "--diagnosis-id", "d-99", "--fault", "nic",
                      "--reason", "link flaps", env=cluster.env)
    assert drain.returncode == 0, drain.stdout + drain.stderr
    assert "DRAIN" in cluster.node_state(node).split("+")
    shown = cluster.run(["scontrol", "show", "node", "-o", node]).stdout
    assert "Reason=faultlens diagnosis=d-99 fault=nic: link flaps" in shown
    resume = faultlens("resume", node, "--actuator", "slurm", env=cluster.env)
    rec = json.loads(resume.stdout)
    assert resume.returncode == 0 and rec["outcome"] == "ok" and rec["op"] == "bring_back"
    assert "DRAIN" not in cluster.node_state(node)


@pytest.mark.broker
def test_nodes_publish_files_the_record_on_the_actions_topic(kafka_settings):
    from faultlens.events.action_record import ActionRecord
    from faultlens.streams.reader import read_topic

    job = f"by-hand-{os.getpid()}"
    r = faultlens("resume", "n7", "--job", job, "--publish", "--bootstrap", kafka_settings.bootstrap,
                  "--actuator", "script", "--actuator-command", f"{sys.executable} -c \"print('back')\"")
    assert r.returncode == 0, r.stderr
    action, recorded = r.stdout.splitlines()  # the operation, then the resume in the fleet record
    printed = ActionRecord.from_dict(json.loads(action))
    assert json.loads(recorded)["node"] == "n7" and json.loads(recorded)["fleet_record"] == "resume recorded"
    published = [ActionRecord.decode(m.value) for m in read_topic(kafka_settings, "actions", idle_s=0.5, timeout_s=120)
                 if m.key == job.encode()]
    assert published == [printed] and printed.outcome == "ok" and printed.nodes == ("n7",)
