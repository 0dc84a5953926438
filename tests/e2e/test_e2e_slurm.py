"""End to end with real processes, the embedded broker and a real slurmctld (docs/design.md §4 rung 3):

a rank of a torch job dies of a CUDA error → `faultlens collect` reads it from the rank's log →
`faultlens diagnose` finds no culprit (stop-time diagnosis) → `faultlens remediate --stop-checks
--actuator slurm` sends a signed run_checks → each machine's agent runs its real checks; the
suspect's disk check fails (it lacks the free space the job asks for) → only that machine is
evicted, drained in slurmctld with the diagnosis id as the reason → the launcher, which held the
crashed job for the verdict, restarts it on a standby and it finishes. The healthy machine passes
its checks and stays in service.

The job's machines carry the Slurm test cluster's node names (bench/testbed/slurm_cluster.py):
fl-node1 is this host's slurmd, fl-node2 is defined but never registers; a drain works on both.
Skipped, saying why, where slurm-wlm and munge are not installed.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid

import pytest

from faultlens.collectors.checks.suite import ChecksConfig, timeouts
from faultlens.demo import processes as pipeline
from faultlens.events import topics
from faultlens.events.action_record import ActionRecord
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import decode
from faultlens.events.signing import write_key_pair
from faultlens.remediation.actuators.slurm import parse_show_node, state_flags
from tests.kafka_fixtures import job_records
from tests.progress import files_size, procs_progress, wait_until
from tests.remediation.slurm_fixture import GHOST_NODES, REAL_NODE, skip_reason

REASON = skip_reason()
# Waits end when their event comes, or fail when no process of the test printed, logged (at INFO) or
# wrote anything (ranks' logs, checkpoints, state) for STALL_S: never at a fixed time a loaded
# machine outruns. The pytest-timeout above the default is the outer bound against a livelock.
pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.skipif(REASON is not None, reason=REASON or ""),
              pytest.mark.timeout(900)]
STALL_S = 90.0

HEALTHY, SUSPECT = REAL_NODE, GHOST_NODES[0]
STANDBYS = GHOST_NODES[1:]
CUDA_ERROR = "CUDA error: an illegal memory access was encountered"
CHECK_TIMEOUT_S = 30.0
# The remediator waits for the agents' answers as long as their whole suite may take under its
# per-check timeouts (the collective's ranks import torch, slow on a loaded CI machine): a shorter
# wait reads a slow but healthy answer as silence and restarts in place. A prompt answer ends it.
CHECKS_WAIT_S = sum(timeouts(ChecksConfig(timeout_s=CHECK_TIMEOUT_S)).values()) + 30.0


def show_node(cluster, node: str) -> dict[str, str]:
    return parse_show_node(cluster.run(["scontrol", "show", "node", "-o", node]).stdout)[node]


def check_results(settings, job: str) -> list:
    return [e for e in job_records(settings, topics.CHECKS, decode, job, idle_s=0.3) if e.kind == "result"]


@pytest.fixture
def cluster(slurm_cluster):
    """The Slurm cluster with every machine back in service after the test."""
    yield slurm_cluster
    for node in (REAL_NODE, *GHOST_NODES):
        if "DRAIN" in slurm_cluster.node_state(node):
            slurm_cluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


@pytest.mark.long(50)
def test_e2e_slurm_crash_checks_fail_on_one_machine_which_is_drained_and_the_job_finishes(cluster, kafka_settings,
                                                                                         tmp_path):
    t0 = time.monotonic()
    job = f"e2e-slurm-{uuid.uuid4().hex[:8]}"
    bootstrap = kafka_settings.bootstrap
    private, public = write_key_pair(tmp_path / "keys")
    env = {**{k: v for k, v in os.environ.items() if k != "SLURM_CONF"},
           "FAULTLENS_SIGNING_KEY": str(private), "FAULTLENS_VERIFY_KEY": str(public),
           "FAULTLENS_STATE_DIR": str(tmp_path / "state"), "FAULTLENS_HOME": str(tmp_path / "home"),
           "FAULTLENS_BOOTSTRAP": bootstrap, "FAULTLENS_LOG_LEVEL": "INFO"}
    work = tmp_path / "work"
    work.mkdir()
    # The suspect machine's agent is asked for more free space than its disk holds: a genuine
    # failure of the real disk check (the job could not write its checkpoints there).
    too_much_gb = 2 * shutil.disk_usage(work).total / 1024 ** 3
    started: list[pipeline.Proc] = []

    def start(proc: pipeline.Proc) -> pipeline.Proc:
        started.append(proc)
        return proc

    def explain() -> str:
        return "\n".join(f"--- {p.name} (rc {p.popen.poll()}) lines={p.lines[-6:]}\n{p.tail(1500)}" for p in started)

    def until(condition, what: str):
        return wait_until(condition, progress=lambda: (procs_progress(started), files_size(tmp_path)), stall_s=STALL_S,
                          what=what, explain=explain, poll_s=0.2)

    try:
        start(pipeline.faultlens("diagnose", ["diagnose", "--bootstrap", bootstrap, "--group", f"diag-{job}",
                                              "--grace", "5"], env, tmp_path))
        # Only the remediation consumer holds the scheduler's credentials: Slurm's client settings
        # (SLURM_CONF naming the test controller and its munge socket); nodes never do.
        rem = start(pipeline.faultlens("remediate", [
            "remediate", "--bootstrap", bootstrap, "--act-on", job, "--group", f"rem-{job}",
            "--max-job-share", "0.5", "--breaker-share", "0.9", "--standby", ",".join(STANDBYS),
            "--stop-checks", "--checks-wait", f"{CHECKS_WAIT_S:.0f}",
            # The launcher restarts the job itself; there is no Slurm job of that name to requeue.
            "--actuator", "slurm", "--no-requeue-on-evict"],
            {**env, "SLURM_CONF": cluster.env["SLURM_CONF"]}, tmp_path))
        agents = {}
        for node, extra in ((HEALTHY, []), (SUSPECT, ["--check-min-free-gb", f"{too_much_gb:.0f}"])):
            agents[node] = start(pipeline.faultlens(f"collect-{node}", [
                "collect", "--bootstrap", bootstrap, "--job", job, "--node", node, "--no-nvml", "--no-kernel",
                "--heartbeat-interval", "2", "--trainer-log", str(tmp_path / "ranks" / f"*-{node}.log"),
                "--check-path", str(work), "--check-timeout", f"{CHECK_TIMEOUT_S:.0f}", *extra], env, tmp_path))
        assert until(lambda: all(a.find(lambda line: line.get("event") == "started") for a in agents.values()),
                     "every agent's started line"), explain()
        launcher = start(pipeline.launcher(
            ["--job", job, "--nodes", "2", "--node-names", f"{HEALTHY},{SUSPECT}", "--standby", ",".join(STANDBYS),
             "--grace", "3", "--crash-wait", "20"],
            ["--ckpt-dir", str(tmp_path / "ckpt"), "--ckpt-every", "10", "--steps", "40", "--step-sleep", "0.1",
             "--crash-rank", "1", "--crash-at", "15", "--crash-error", CUDA_ERROR], env, tmp_path))

        restart = until(lambda: launcher.find(lambda line: line.get("event") == "restart"), "the launcher's restart")
        assert restart, explain()
        done = until(lambda: launcher.find(lambda line: line.get("event") == "done"), "the launcher's done")
        assert done, explain()
    finally:
        for p in reversed(started):
            p.stop()
    took = time.monotonic() - t0

    # The crash was held for the checks, then the job went on without the suspect.
    assert launcher.find(lambda line: line.get("event") == "crash")
    assert launcher.find(lambda line: line.get("event") == "waiting_for_checks"), explain()
    [first] = restart[:1]
    assert first["action"] == "evict" and first["nodes_out"] == [SUSPECT] and first["nodes_in"] == [STANDBYS[0]], \
        f"{restart}\n{explain()}"
    assert first["nodes"] == [HEALTHY, STANDBYS[0]]
    assert len(restart) == 1, restart  # no premature reattempt on the suspect machine before the verdict

    # The diagnosis: a CUDA error with no clear culprit, sent to stop-time diagnosis.
    cmds = job_records(kafka_settings, topics.COMMANDS, Command.decode, job, idle_s=0.3)
    [ask] = [c for c in cmds if c.action == "run_checks"]
    [evict] = [c for c in cmds if c.action == "evict"]
    diagnoses = {d.id: d for d in job_records(kafka_settings, "diagnoses", Diagnosis.decode, job, idle_s=0.3)}
    [cuda] = [d for d in diagnoses.values() if d.fault == "cuda_error"]
    assert cuda.action == "stop_time_diagnosis" and "illegal memory access" in cuda.detail, cuda
    # Rank 0's gloo error ("Connection closed by peer": it only waited on the dead rank) is the
    # crash's echo, not a fault of the healthy machine: no diagnosis names it.
    crash = diagnoses[ask.diagnosis_id]
    assert crash.id == cuda.id and crash.nodes == (SUSPECT,), crash
    assert not [d for d in diagnoses.values() if HEALTHY in d.nodes], diagnoses
    assert set(ask.nodes) == {HEALTHY, SUSPECT}
    assert evict.diagnosis_id == crash.id and evict.nodes == (SUSPECT,)
    assert evict.params["failed_checks"] == {SUSPECT: ["disk"]}
    assert first["command_id"] == evict.id

    # Both agents ran their real checks; only the suspect failed, on its disk.
    results = {e.node: e for e in check_results(kafka_settings, job)}
    assert set(results) == {HEALTHY, SUSPECT}
    assert results[HEALTHY].data["passed"] is True and results[HEALTHY].data["request_id"] == ask.id
    assert results[SUSPECT].data["passed"] is False and results[SUSPECT].data["failed"] == ["disk"]
    disk = next(c for c in results[SUSPECT].data["checks"] if c["name"] == "disk")
    assert "GiB free" in disk["detail"] and "needs" in disk["detail"] and not disk["inconclusive"]

    # Slurm: the suspect is drained, the reason naming the diagnosis; the healthy machine is not.
    suspect = show_node(cluster, SUSPECT)
    assert "DRAIN" in state_flags(suspect["State"]), suspect
    assert suspect["Reason"].startswith(f"faultlens diagnosis={crash.id} fault={crash.fault}"), suspect
    for node in (HEALTHY, *STANDBYS):
        assert "DRAIN" not in state_flags(show_node(cluster, node)["State"]), node
    decided = rem.find(lambda line: line.get("action") == "evict" and line.get("job") == job)  # the broker has other tests' jobs
    assert decided and [(a["op"], a["outcome"], a["nodes"]) for a in decided[0]["actions"]] == [
        ("take_out", "ok", [SUSPECT])]
    recorded = job_records(kafka_settings, topics.ACTIONS, ActionRecord.decode, job, idle_s=0.3)
    assert [(a.op, a.outcome, a.actuator, a.nodes, a.diagnosis_id) for a in recorded] == [
        ("take_out", "ok", "slurm", (SUSPECT,), crash.id)]
    print(f"e2e slurm: {took:.1f}s")
