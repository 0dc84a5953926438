"""The Slurm actuator against a real slurmctld + slurmd (bench/testbed/slurm_cluster.py).

Skipped, saying why, where Debian's slurm-wlm and munge are not installed. What each test checks
is read back with the fixture's own scontrol/squeue calls, not through the actuator's parser.
"""

from __future__ import annotations

import pytest

from faultlens.remediation.actuators.base import ActionRequest, carry_out
from faultlens.remediation.actuators.slurm import SlurmActuator, SlurmConfig, parse_show_node, state_flags
from tests.progress import others_ticks, wait_until
from tests.remediation.slurm_fixture import GHOST_NODES, REAL_NODE, skip_reason

REASON = skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


# The actuator's bound on each scontrol/scancel it runs: against a hang only, far above what a
# loaded machine's call takes (not 10 s), where the bound is not what a test checks (issue 47).
CALL_S = 60


def _until(cluster, ready, what: str) -> None:
    """Waited for while the cluster's daemons and job steps (children of this process) or this
    process's other threads compute: a minute of none fails, not a fixed 15-20 s (issue 47)."""
    wait_until(ready, progress=others_ticks, stall_s=60, limit_s=240, what=what, explain=cluster.logs, poll_s=0.2)


@pytest.fixture
def slurm(slurm_cluster):
    """The actuator, and the cluster with every node back in service after the test."""
    yield SlurmActuator(SlurmConfig(timeout_s=CALL_S, env=slurm_cluster.env)), slurm_cluster
    slurm_cluster.run(["scancel", "--user=root", "--full"], check=False)
    for node in (REAL_NODE, *GHOST_NODES):
        if "DRAIN" in slurm_cluster.node_state(node):
            slurm_cluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


def request(op, nodes=(), job="train-1", diagnosis="d-7f3a", fault="gpu_lost"):
    return ActionRequest(op, job, tuple(nodes), diagnosis, fault, f"{fault}: evict and restart on warm standbys", "evict")


def reason_of(cluster, node):
    out = cluster.run(["scontrol", "show", "node", "-o", node]).stdout
    return out.split(" Reason=", 1)[1].strip() if " Reason=" in out else ""


def test_slurm_drain_names_the_diagnosis_and_the_fault(slurm):
    actuator, cluster = slurm
    rec = carry_out(actuator, request("take_out", [GHOST_NODES[0], GHOST_NODES[1]]), "act")
    assert rec.outcome == "ok", rec.detail
    for node in GHOST_NODES[:2]:
        assert "DRAIN" in cluster.node_state(node).split("+")
        assert reason_of(cluster, node).startswith("faultlens diagnosis=d-7f3a fault=gpu_lost: gpu_lost: evict")
    assert "DRAIN" not in cluster.node_state(GHOST_NODES[2])


def test_slurm_observe_only_changes_nothing_and_says_what_it_would_do(slurm):
    actuator, cluster = slurm
    rec = carry_out(actuator, request("take_out", [REAL_NODE]), "observe")
    assert rec.outcome == "skipped" and "observe-only" in rec.detail and REAL_NODE in rec.detail
    assert "DRAIN" not in cluster.node_state(REAL_NODE)


def test_slurm_signal_mode_reaches_the_job_step(slurm):
    # Before the drain/resume cycle: a resumed node counts as not responding until slurmctld's next
    # ping (SlurmdTimeout/3), and a job would wait for it.
    actuator, cluster = slurm
    marker, ready = cluster.root / "got-usr1", cluster.root / "trap-set"
    job = cluster.submit(f"srun bash -c 'trap \"echo USR1 > {marker}; exit 0\" USR1; touch {ready}; "
                         "while true; do sleep 0.1; done'")
    _until(cluster, ready.exists, "the job step to set its trap")
    signaller = SlurmActuator(SlurmConfig(timeout_s=CALL_S, requeue="signal", signal="USR1", env=cluster.env))
    rec = carry_out(signaller, request("requeue", job=job), "act")
    assert rec.outcome == "ok" and rec.detail == f"sent SIGUSR1 to job {job}"
    _until(cluster, marker.exists, "the step to catch SIGUSR1")
    assert marker.read_text().strip() == "USR1"


def test_slurm_drain_requeue_and_resume_a_running_job(slurm):
    """The whole cycle on the one machine that runs jobs: drain it under a running job, requeue
    the job (Slurm counts the restart and holds it: its only machine is drained), bring the
    machine back."""
    actuator, cluster = slurm
    job = cluster.submit("sleep 3600", "--job-name=train-cycle")  # cancelled after the test, however slow it is
    _until(cluster, lambda: cluster.job_field(job, "JobState") == "RUNNING", "the job to run")

    out = carry_out(actuator, request("take_out", [REAL_NODE], job="train-cycle"), "act")
    assert out.outcome == "ok", out.detail
    assert "DRAIN" in cluster.node_state(REAL_NODE).split("+")  # running jobs go on: MIXED/ALLOCATED+DRAIN

    requeued = carry_out(actuator, request("requeue", [REAL_NODE], job="train-cycle"), "act")  # by name
    assert requeued.outcome == "ok" and requeued.detail == f"requeued job {job}"
    _until(cluster, lambda: cluster.job_field(job, "JobState") == "PENDING", "the job to be requeued")
    assert cluster.job_field(job, "Restarts") == "1"

    back = carry_out(actuator, request("bring_back", [REAL_NODE]), "act")
    assert back.outcome == "ok", back.detail
    assert "DRAIN" not in cluster.node_state(REAL_NODE)


def test_slurm_resume_of_a_never_registered_machine_is_judged_by_its_state(slurm):
    """Slurm 22.05 lifts the drain of an UNKNOWN node yet exits 1 "Invalid node state specified":
    the node's state, not the exit code, decides."""
    actuator, cluster = slurm
    ghost = GHOST_NODES[2]
    assert carry_out(actuator, request("take_out", [ghost]), "act").outcome == "ok"
    rec = carry_out(actuator, request("bring_back", [ghost]), "act")
    assert rec.outcome == "ok", rec.detail
    assert "DRAIN" not in cluster.node_state(ghost)
    assert "drain lifted although" in rec.detail


def test_slurm_errors_are_recorded_not_raised(slurm):
    actuator, cluster = slurm
    unknown = carry_out(actuator, request("take_out", ["no-such-node"]), "act")
    assert unknown.outcome == "error" and "exited 1" in unknown.detail
    no_job = carry_out(actuator, request("requeue", job="no-such-job"), "act")
    assert no_job.outcome == "error" and "no Slurm job named 'no-such-job'" in no_job.detail
    twins = [cluster.submit("sleep 60", "--job-name=twin", "--hold") for _ in range(2)]
    ambiguous = carry_out(actuator, request("requeue", job="twin"), "act")
    assert ambiguous.outcome == "error" and f"2 Slurm jobs are named 'twin' ({','.join(twins)})" in ambiguous.detail
    assert all(cluster.job_field(j, "Restarts") == "0" for j in twins)
    dead = SlurmActuator(SlurmConfig(timeout_s=2, env={**cluster.env, "SLURM_CONF": str(cluster.root / "missing.conf")}))
    down = carry_out(dead, request("take_out", [REAL_NODE]), "act")
    assert down.outcome == "error" and down.detail


def test_slurm_show_node_parse_of_real_output(slurm):
    actuator, cluster = slurm
    cluster.run(["scontrol", "update", f"NodeName={GHOST_NODES[0]}", "State=DRAIN",
                 "Reason=faultlens diagnosis=abc fault=nic: nic flap OS=fake"])
    parsed = parse_show_node(cluster.run(["scontrol", "show", "node", "-o"]).stdout)
    assert set(parsed) == {REAL_NODE, *GHOST_NODES}
    ghost = parsed[GHOST_NODES[0]]
    assert ghost["Reason"].startswith("faultlens diagnosis=abc fault=nic: nic flap OS=fake [root@")
    assert "DRAIN" in state_flags(ghost["State"])
    assert parsed[REAL_NODE]["OS"].startswith("Linux ")  # a value with spaces stays whole
    assert parsed[REAL_NODE]["NodeAddr"] == "127.0.0.1"
