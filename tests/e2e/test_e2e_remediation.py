"""End to end with real processes on the embedded broker: a torch job under the launcher,
`faultlens remediate`, and (where the test needs them) `faultlens diagnose` and `faultlens collect`.

- an injected hardware diagnosis → a signed evict → the launcher restarts on a standby;
- a hung rank → stall → stacks (py-spy via collect, faulthandler via the hook) → clustering →
  evict of the group holding that rank → restart without it;
- a NaN loss → rollback, never an eviction.
"""

from __future__ import annotations

import importlib.util
import os
import time
import uuid
from types import SimpleNamespace

import pytest

from faultlens.demo import processes as pipeline
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import decode
from faultlens.events.signing import load_verify_keys, write_key_pair
from faultlens.streams.producer import Producer
from tests.kafka_fixtures import job_records
from tests.progress import files_size, procs_progress, wait_until

# A wait ends when its event comes, or fails when none of the test's processes printed, logged (at
# INFO) or wrote anything (ranks' logs, checkpoints, state) for STALL_S: never at a fixed time,
# which a loaded machine outruns.
# The pytest-timeout above the default is the outer bound against a livelock.
pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.timeout(900)]
STALL_S = 90.0


def _missing(*modules: str) -> str | None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            return m
    return None


@pytest.fixture
def rig(kafka_settings, tmp_path):
    """The job id, the environment every process gets, and cleanup of whatever was started."""
    job = f"e2e-{uuid.uuid4().hex[:8]}"
    # One deployment: remediate holds the private key, the launcher and its trainers the public one.
    private, public = write_key_pair(tmp_path / "keys")
    env = {**os.environ, "FAULTLENS_SIGNING_KEY": str(private), "FAULTLENS_VERIFY_KEY": str(public),
           "FAULTLENS_STATE_DIR": str(tmp_path / "state"), "FAULTLENS_HOME": str(tmp_path / "home"),
           "FAULTLENS_BOOTSTRAP": kafka_settings.bootstrap, "FAULTLENS_LOG_LEVEL": "INFO"}
    started: list[pipeline.Proc] = []

    def start(proc: pipeline.Proc) -> pipeline.Proc:
        started.append(proc)
        return proc

    r = SimpleNamespace(job=job, env=env, dir=tmp_path, settings=kafka_settings, start=start, procs=started)
    yield r
    for p in reversed(started):
        p.stop()


def remediate(r, *extra: str) -> pipeline.Proc:
    return r.start(pipeline.faultlens("remediate", [
        "remediate", "--bootstrap", r.settings.bootstrap, "--act-on", r.job, "--max-job-share", "0.5", "--breaker-share", "0.9",
        "--group", f"rem-{r.job}", "--standby", "s000,s001", *extra], r.env, r.dir))


def launch(r, nodes: int, trainer: list[str], ppn: int = 1) -> pipeline.Proc:
    return r.start(pipeline.launcher(
        ["--job", r.job, "--nodes", str(nodes), "--procs-per-node", str(ppn), "--standby", "s000,s001",
         "--grace", "3", "--crash-wait", "20"],
        ["--ckpt-dir", str(r.dir / "ckpt"), "--ckpt-every", "10", *trainer], r.env, r.dir))


def ready(r, proc: pipeline.Proc, words: str) -> None:
    """Waits until ``proc`` logged ``words``. A verdict that must reach the job before it ends needs
    the pipeline up before the job starts: on a loaded machine `diagnose` took 15 s to prime its
    topologies while a 100-step job ran through in 19 s, and the rollback came a second too late."""
    assert until(r, lambda: words in proc.tail(20_000), f"{proc.name} logging {words!r}"), explain(r)


def commands(r) -> list[Command]:
    out = job_records(r.settings, "commands", Command.decode, r.job, idle_s=0.3)
    return out


def events(r, topic: str, kind: str | None = None) -> list:
    return [e for e in job_records(r.settings, topic, decode, r.job, idle_s=0.3) if kind is None or e.kind == kind]


def explain(r) -> str:
    """The processes' last lines and the job's diagnoses with their detail: a verdict's reasoning
    (which ranks' dumps it read, its confidence) is what a failed wait needs to be understood."""
    procs = "\n".join(f"--- {p.name} (rc {p.popen.poll()}) lines={p.lines[-6:]}\n{p.tail(1500)}" for p in r.procs)
    try:
        found = job_records(r.settings, "diagnoses", Diagnosis.decode, r.job, idle_s=0.3)
    except Exception as exc:  # the explanation must not hide the failure it explains
        return f"{procs}\n--- diagnoses: unreadable ({exc!r})"
    said = "\n".join(f"{d.fault} {d.action} {d.confidence} nodes={list(d.nodes)}: {d.detail[:600]}" for d in found)
    return f"{procs}\n--- diagnoses of {r.job}\n{said}"


def until(r, condition, what: str):
    """``condition()``'s first truthy value, waited for while the test's processes make progress."""
    return wait_until(condition, progress=lambda: (procs_progress(r.procs), files_size(r.dir)), stall_s=STALL_S, what=what,
                      explain=lambda: explain(r), poll_s=0.2)


def test_e2e_injected_gpu_lost_evicts_and_the_job_finishes_on_a_standby(rig):
    r = rig
    rem = remediate(r)
    job = launch(r, 2, ["--steps", "80", "--step-sleep", "0.1"])
    assert until(r, lambda: (r.dir / "ckpt" / "step_000010.pt").exists(), "the step-10 checkpoint"), explain(r)

    d = Diagnosis(job=r.job, ts=time.time(), onset=time.time(), fault="gpu_lost", action="evict",
                  nodes=("n001",), confidence=0.99, detail="injected by the test")
    with Producer(r.settings) as p:
        p.send("diagnoses", r.job.encode(), d.encode())
        p.flush()

    restart = until(r, lambda: job.find(lambda line: line.get("event") == "restart"), "the launcher's restart")
    assert restart, explain(r)
    assert restart[0]["nodes_out"] == ["n001"] and restart[0]["nodes_in"] == ["s000"]
    assert restart[0]["nodes"] == ["n000", "s000"] and restart[0]["action"] == "evict"
    done = until(r, lambda: job.find(lambda line: line.get("event") == "done"), "the launcher's done")
    assert done, explain(r)

    [cmd] = [c for c in commands(r) if c.action == "evict"]
    assert cmd.verify(load_verify_keys([r.env["FAULTLENS_VERIFY_KEY"]])) and cmd.diagnosis_id == d.id and cmd.nodes == ("n001",)
    assert restart[0]["command_id"] == cmd.id
    assert [e.data["command_id"] for e in events(r, "jobs", "restart")] == [cmd.id]
    decisions = rem.find(lambda line: line.get("diagnosis_id") == d.id)
    assert decisions and decisions[0]["sent"] is True
    # standby s000 ran as a node after the restart: its rank published steps
    assert any(e.node == "s000" for e in events(r, "telemetry.train", "step"))


def test_e2e_nan_loss_ends_in_rollback_not_eviction(rig):
    if (m := _missing("faultlens.diagnosis.edge.consumer")):
        pytest.skip(f"needs `faultlens diagnose` ({m} is not built)")
    r = rig
    diagnose = r.start(pipeline.faultlens("diagnose", ["diagnose", "--bootstrap", r.settings.bootstrap, "--group", f"diag-{r.job}", "--grace", "5"], r.env, r.dir))
    ready(r, remediate(r), "known jobs from the jobs topic")
    ready(r, diagnose, "topology event(s) from the jobs topic")
    job = launch(r, 2, ["--steps", "100", "--step-sleep", "0.1", "--nan-at", "25"])

    restart = until(r, lambda: job.find(lambda line: line.get("event") == "restart"), "the launcher's restart")
    assert restart, explain(r)
    assert restart[0]["action"] == "rollback" and restart[0]["resume"] == "rollback" and restart[0]["nodes_out"] == []
    done = until(r, lambda: job.find(lambda line: line.get("event") == "done"), "the launcher's done")
    assert done, explain(r)
    actions = [c.action for c in commands(r)]
    assert "rollback" in actions and "evict" not in actions


@pytest.mark.long(40)
def test_e2e_hung_rank_is_found_by_stacks_and_its_group_evicted(rig):
    if (m := _missing("faultlens.diagnosis.edge.consumer", "faultlens.collectors.agent")):
        pytest.skip(f"needs `faultlens diagnose` and `faultlens collect` ({m} is not built)")
    r = rig
    # TP=1, PP=2, DP=2 on 4 nodes of 1 rank: rank 3 is stage 1 of replica 1; its pipeline is ranks 2, 3.
    # A 15 s hang floor instead of the production 60 s: steps take 0.1 s here, so 15 s of no
    # progress is still 150 median steps, and the test spends its time on the pipeline, not waiting.
    r.start(pipeline.faultlens("diagnose", ["diagnose", "--bootstrap", r.settings.bootstrap, "--group", f"diag-{r.job}",
                                            "--grace", "5", "--hang-floor", "15"], r.env, r.dir))
    remediate(r)
    for i in range(4):
        node = f"n{i:03d}"
        r.start(pipeline.faultlens(f"collect-{node}", [
            "collect", "--bootstrap", r.settings.bootstrap, "--job", r.job, "--node", node, "--no-nvml", "--no-kernel", "--heartbeat-interval", "2",
            "--proc-pattern", rf"reference_trainer --node {node}\b"], r.env, r.dir))
    job = launch(r, 4, ["--steps", "400", "--step-sleep", "0.1", "--pp", "2", "--hang-rank", "3", "--hang-at", "20"])

    restart = until(r, lambda: job.find(lambda line: line.get("event") == "restart"), "the launcher's restart")
    assert restart, explain(r)
    # What follows reads what the pipeline wrote to the broker and the restart's line: the job's next
    # round (four ranks importing torch, then stepping beside the reads) is no part of it (S7).
    job.stop()
    evicts = [c for c in commands(r) if c.action == "evict"]
    assert evicts, explain(r)
    cmd = evicts[0]
    final = None
    for d in job_records(r.settings, "diagnoses", Diagnosis.decode, idle_s=0.3):
        final = d if d.id == cmd.diagnosis_id else final
    assert final is not None
    # the blamed group holds the hung rank and lies inside its pipeline (ranks 2, 3 on n002, n003)
    assert final.fault == "job_hang" and final.action == "evict" and final.group
    assert "n003" in cmd.nodes and set(cmd.nodes) <= {"n002", "n003"} and cmd.nodes == final.nodes
    assert cmd.params["group"] == final.group
    assert any(c.action == "capture_stacks" for c in commands(r))
    assert restart[0]["action"] == "evict" and restart[0]["command_id"] == cmd.id
    assert restart[0]["nodes_out"] == list(cmd.nodes)
    assert "n003" not in restart[0]["nodes"] and len(restart[0]["nodes"]) == 4
    mine = events(r, "telemetry.stacks", "stack_dump")
    assert {"py-spy", "faulthandler"} <= {e.data.get("tool") for e in mine}
    assert any("stuck_in_all_gather_into_tensor" in e.data["dump"] for e in mine if e.data.get("rank") == 3)
