"""The launcher's restart logic with real child processes and the real broker (no torch needed)."""

import json
import os
import subprocess
import sys
import uuid

import pytest

from faultlens.events.envelope import decode
from faultlens.events.signing import write_key_pair
from tests.kafka_fixtures import job_records
from tests.progress import cpu_ticks, run_watched, wait_until
from tests.trainer_hooks.launcher_lines import follow, until

pytestmark = pytest.mark.broker
# The launcher printed, wrote and computed nothing for this long: stuck, not slow. The outer
# limits (240 s) are under pytest's 300 s, so the helper's message is what a failure says.
STALL_S = 90.0


def valid_events(settings, topic):
    return job_records(settings, topic, decode, None, idle_s=0.3)


def launch(settings, job, codes, *extra, tmp_path):
    _, public = write_key_pair(tmp_path / f"keys-{job}")
    env = {**os.environ, "FAULTLENS_BOOTSTRAP": settings.bootstrap, "FAULTLENS_STATE_DIR": str(tmp_path / "state")}
    out = run_watched([sys.executable, "-m", "faultlens.trainer_hooks.launcher", "--job", job, "--nodes", "2",
                       "--verify-key", str(public),
                       "--trainer", "tests.trainer_hooks.exiting_trainer", "--node-arg", "",
                       "--command-wait", "0.5", "--crash-wait", "0.5", "--grace", "0.5", *extra,
                       "--", "--codes", codes, "--together", str(tmp_path / f"started-{job}")],
                      env=env, stall_s=STALL_S, cpu=True, watch=[tmp_path], limit_s=240)
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines()]


def test_exit_codes_without_a_command_still_restart_the_right_way(kafka_settings, tmp_path):
    job = f"launch-{uuid.uuid4().hex[:8]}"
    rc, lines = launch(kafka_settings, job, "77,75,1,0", "--standby", "s000", tmp_path=tmp_path)
    assert rc == 0
    events = [line["event"] for line in lines]
    assert events == ["start", "restart", "start", "restart", "start", "crash", "restart", "start", "done"]
    restarts = [line for line in lines if line["event"] == "restart"]
    assert [r["action"] for r in restarts] == ["rollback", "evict", "reattempt"]
    assert restarts[0]["resume"] == "rollback" and restarts[1]["resume"] == "latest"
    # both nodes exited "evicted": the first is replaced by the standby, the second leaves the job
    assert restarts[1]["nodes_out"] == ["n000", "n001"] and restarts[1]["nodes"] == ["s000"]
    mine = [e for e in valid_events(kafka_settings, "jobs") if e.job == job]
    restarted = [e.data for e in mine if e.kind == "restart"]
    assert [e["command_id"] for e in restarted] == [None, None, None] and restarted[1]["nodes_in"] == ["s000"]
    # the last word on the bus: the job ended (its nodes going quiet is no machine's silence)
    assert mine[-1].kind == "end" and mine[-1].data["reason"] == "finished" and mine[-1].data["nodes"] == ["s000"]


def test_stop_code_ends_the_job_and_restarts_are_bounded(kafka_settings, tmp_path):
    stopped, gave_up = (f"launch-{uuid.uuid4().hex[:8]}" for _ in range(2))
    rc, lines = launch(kafka_settings, stopped, "79", tmp_path=tmp_path)
    assert rc == 79 and lines[-1]["event"] == "stopped"
    rc, lines = launch(kafka_settings, gave_up, "1", "--max-restarts", "2", tmp_path=tmp_path)
    assert rc == 1 and lines[-1]["event"] == "gave_up"
    assert sum(1 for line in lines if line["event"] == "start") == 3
    ends = {e.job: e.data["reason"] for e in valid_events(kafka_settings, "jobs") if e.kind == "end"}
    assert ends[stopped] == "stopped" and ends[gave_up] == "gave_up"


def test_the_launcher_will_not_run_a_job_it_cannot_verify_commands_for(kafka_settings):
    env = {**os.environ, "FAULTLENS_BOOTSTRAP": kafka_settings.bootstrap, "FAULTLENS_SECRET": "old-shared-secret"}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    out = run_watched([sys.executable, "-m", "faultlens.trainer_hooks.launcher", "--job", "j", "--nodes", "1",
                       "--trainer", "tests.trainer_hooks.exiting_trainer", "--", "--codes", "0"],
                      env=env, stall_s=STALL_S, cpu=True, limit_s=240)
    assert out.returncode == 2 and "no command verify key" in out.stderr and "FAULTLENS_SECRET is ignored" in out.stderr


def test_a_cancelled_job_says_so_on_the_bus(kafka_settings, tmp_path):
    """SIGTERM (scancel, the scheduler's end of the allocation): the trainers are killed and the
    job's `end` says `cancelled`, so its agents stopping one by one next is no machine's silence."""
    import signal
    import time

    job = f"launch-{uuid.uuid4().hex[:8]}"
    _, public = write_key_pair(tmp_path / "keys")
    env = {**os.environ, "FAULTLENS_BOOTSTRAP": kafka_settings.bootstrap, "FAULTLENS_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-m", "faultlens.trainer_hooks.launcher", "--job", job, "--nodes", "2",
                             "--verify-key", str(public), "--trainer", "tests.trainer_hooks.exiting_trainer",
                             "--node-arg", "", "--", "--codes", "0", "--sleep", "120"],
                            env=env, stdout=subprocess.PIPE, text=True)
    lines, seen = follow(proc), []
    try:
        until(lines, "start", STALL_S, seen, watch=[tmp_path])
        time.sleep(0.5)  # the trainers under way (they sleep 120 s), not a bound
        proc.send_signal(signal.SIGTERM)
        until(lines, "cancelled", STALL_S, seen, watch=[tmp_path])
        wait_until(lambda: proc.poll() is not None, progress=lambda: cpu_ticks(proc.pid), stall_s=STALL_S,
                   limit_s=240, what="the cancelled launcher to exit")
    finally:
        proc.kill()
    assert proc.returncode == 130
    [end] = [e for e in valid_events(kafka_settings, "jobs") if e.job == job and e.kind == "end"]
    assert end.data["reason"] == "cancelled" and end.data["nodes"] == ["n000", "n001"]
