"""`faultlens collect` as a real process on the real broker: starts, publishes, stops cleanly on SIGTERM; its
refusals at start through main() in the test's process."""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest

from faultlens.events.command_memory import memory_file
from faultlens.events.envelope import decode
from tests.in_process import faultlens_main
from tests.kafka_fixtures import wait_for_records
from tests.progress import Watched, cpu_ticks, run_watched

pytestmark = [pytest.mark.broker, pytest.mark.e2e]

WARN = "n0:123:456 [2] NCCL WARN NET/IB : Got completion with error 12"

# Every wait on a `faultlens collect` here is for its line or its end while it prints or computes
# (tests/progress.py, issue 47): a minute of neither fails; a busy machine's slow start does not.
STALL_S, LIMIT_S = 60, 280


def _collect(*argv: str, env: dict[str, str] | None = None):
    return run_watched([sys.executable, "-m", "faultlens", "collect", *argv], env=env, stall_s=STALL_S, cpu=True,
                       limit_s=LIMIT_S)


def test_collect_help_names_the_flags():
    out = _collect("--help")
    assert out.returncode == 0
    for flag in ("--job", "--node", "--interval", "--heartbeat-interval", "--kernel-log", "--no-kernel",
                 "--trainer-log", "--no-nvml", "--launcher-pid", "--proc-pattern", "--verify-key", "--state-dir", "--spool-dir",
                 "--spool-max-mb", "--bootstrap"):
        assert flag in out.stdout


# A refusal at start: main() in this process (tests/in_process.py; --help above and the broker tests
# run the command as a user does), not an interpreter started to print one line.
def test_collect_without_a_job_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("FAULTLENS_JOB", raising=False)
    out = faultlens_main("collect", "--bootstrap", "127.0.0.1:1")
    assert out.returncode == 2 and "--job" in out.stderr


def test_collect_refuses_the_removed_shared_secret_clearly(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    out = faultlens_main("collect", "--job", "j", "--bootstrap", "127.0.0.1:1", "--secret-file", secret)
    assert out.returncode == 2 and "HMAC" in out.stderr and "--verify-key" in out.stderr


def test_collect_e2e_runs_until_sigterm(kafka_settings, tmp_path):
    job = f"cli-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "train.log"
    log.touch()
    env = {**os.environ, "FAULTLENS_JOB": job, "FAULTLENS_NODE": "cli-node", "FAULTLENS_HOME": str(tmp_path)}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    with Watched([sys.executable, "-m", "faultlens", "collect", "--bootstrap", kafka_settings.bootstrap, "--no-kernel",
                  "--trainer-log", str(log), "--trainer-from-start", "--heartbeat-interval", "0.2"],
                 env=env, cpu=True) as proc:
        started = json.loads(proc.wait_line(lambda line: line.startswith("{"), stall_s=STALL_S, limit_s=LIMIT_S))
        assert started["event"] == "started" and started["job"] == job and started["node"] == "cli-node"
        assert started["spool"].startswith(str(tmp_path))
        assert started["verify_key_ids"] == [] and "stacks" not in started["sources"]  # no key: no stack capture
        assert started["command_memory_file"] == str(memory_file(tmp_path, "agent", job, "cli-node"))  # in FAULTLENS_HOME
        with open(log, "a") as f:
            f.write(WARN + "\n\x00\x01\x02\x03\x04garbage\n")  # a torn binary line: counted, skipped
        # One reader for the whole wait (tests/kafka_fixtures.py: re-reading the shared topic from
        # its start, each read cut at 3 s, never reached the end on a loaded machine); the event
        # comes within a second. Waited for while the agent computes (it beats every 0.2 s): one
        # that died or hung stops its clock, and a minute of that fails.
        found = wait_for_records(kafka_settings, "telemetry.nccl", decode, job, bool, timeout_s=STALL_S,
                                 progress=lambda _: cpu_ticks(proc.pid), limit_s=LIMIT_S - 40)
        done = proc.stop(stall_s=STALL_S, limit_s=LIMIT_S)
    out, err = done.stdout, done.stderr
    assert [(e.kind, e.node, e.data["line"]) for e in found] == [("nccl_warn", "cli-node", WARN)]
    assert done.returncode == 0, err[-3000:]
    stopped = json.loads(out.strip().splitlines()[-1])
    assert stopped["event"] == "stopped" and stopped["spool_waiting"] == 0 and stopped["delivered"] >= 2
    assert stopped["sources"]["trainer"] == "stopped"
    assert stopped["logs"]["trainer"] == {"lines": 2, "events": 1, "garbled": 1, "folded": 0, "folded_events": 0}
    if _has_nvml():
        return
    # No GPU here: one clear line about NVML on stderr, and the other sources ran on.
    nvml_lines = [line for line in err.splitlines() if "NVML not available" in line]
    assert len(nvml_lines) == 1, err
    assert stopped["sources"]["nvml"].startswith("unavailable")


def _has_nvml() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_collect_stops_by_itself_after_duration(kafka_settings, tmp_path):
    job = f"cli-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path)}
    env.pop("FAULTLENS_VERIFY_KEY", None)
    # Stopping by itself is exiting at all: without --duration it runs until a signal, beating
    # (computing) all the while, and the outer limit (against that hang) fails it.
    out = _collect("--bootstrap", kafka_settings.bootstrap, "--job", job, "--node", "dur-node", "--no-kernel",
                   "--no-nvml", "--no-net", "--heartbeat-interval", "0.2", "--duration", "1.5", env=env)
    assert out.returncode == 0, out.stderr
    stopped = json.loads(out.stdout.strip().splitlines()[-1])
    assert stopped["event"] == "stopped" and stopped["delivered"] >= 3  # heartbeats every 0.2 s for 1.5 s
    refused = faultlens_main("collect", "--job", job, "--bootstrap", "127.0.0.1:1", "--duration", "0")
    assert refused.returncode == 2 and "--duration" in refused.stderr
