"""What a user sees when the broker is missing or does not answer: one line that says so and exit 1,
never a traceback, and never an empty answer that reads as "nothing wrong" (`nodes list` saying no
machine has a record when it could not read the record at all would hide a lemon)."""

from __future__ import annotations

import os
import sys

import pytest

from faultlens.streams.broker import free_port
from tests.in_process import faultlens_main
from tests.progress import Watched, run_watched


def _env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FAULTLENS_BOOTSTRAP", "FAULTLENS_CONFIG")}
    return {**env, "FAULTLENS_HOME": str(tmp_path / "home")}


@pytest.fixture
def own_home(tmp_path, monkeypatch):
    """_env's settings for a command run in this process (tests/in_process.py): a command that ends by
    itself after a line or two. Nine interpreters started for those were ~0.7 CPU-s each; the commands
    that wait on a broker, and the bootstrap that does not answer, still run as a user runs them."""
    monkeypatch.setenv("FAULTLENS_HOME", str(tmp_path / "home"))
    for name in ("FAULTLENS_BOOTSTRAP", "FAULTLENS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_nodes_without_a_broker_says_what_it_looked_for_and_exits_1(tmp_path, own_home):
    for op in (["list"], ["show", "n1"]):
        proc = faultlens_main("nodes", *op)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "no broker to talk to" in proc.stderr and "faultlens up" in proc.stderr, proc.stderr[-2000:]
        assert proc.stdout == ""


@pytest.mark.long(35)
def test_a_bootstrap_that_does_not_answer_is_one_line_not_a_traceback(tmp_path):
    # kafka-python gives up after its own ~30 s bootstrap wait; the three run side by side so the
    # test waits that out once. Each is waited for while it logs its retries, never a fixed time.
    down = f"127.0.0.1:{free_port()}"
    trace = tmp_path / "t.parquet"
    sim = faultlens_main("simulate", "--nodes", "2", "--gpus", "2", "--duration", "30", "--out", trace)  # the input, in this process
    assert sim.returncode == 0, sim.stderr[-2000:]
    argvs = {"status": ["status"], "replay": ["replay", str(trace), "--speed", "0"], "nodes": ["nodes", "list"]}
    procs = {
        name: Watched([sys.executable, "-m", "faultlens", *argv, "--bootstrap", down], env=_env(tmp_path), cpu=True)
        for name, argv in argvs.items()
    }
    done = {name: p.wait_exit(stall_s=90, limit_s=280) for name, p in procs.items()}
    for name, proc in done.items():
        assert proc.returncode == 1, (name, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (name, proc.stderr[-2000:])
    for name in ("status", "replay"):
        assert f"faultlens {name}: no Kafka broker answered" in done[name].stderr and down in done[name].stderr
    nodes = done["nodes"]
    assert "faultlens nodes list: the fleet record at" in nodes.stderr and "could not be read" in nodes.stderr
    assert "no machine in the fleet record" not in nodes.stdout + nodes.stderr


@pytest.mark.broker
def test_up_on_its_own_broker_stops_without_a_page_of_kafka_errors(tmp_path):
    # Remediation's fleet record clients were never closed: `up` stopped its embedded broker under
    # them and a clean Ctrl-C ended in ~13 kafka ERROR lines and a ConnectionResetError traceback.
    # With every client closed first, a busy CI machine still got one: kafka-python's close racing
    # its own IO thread (a read on the transport it had just closed), kept at DEBUG by
    # streams/kafka_close_race.py, unit-tested in tests/streams/test_kafka_close_race.py.
    from faultlens.demo import processes as pipeline
    from tests.progress import procs_progress, stop_proc, wait_until

    up = pipeline.faultlens("up", ["up", "--db", str(tmp_path / "h.duckdb")], _env(tmp_path), tmp_path)
    try:
        ready = wait_until(
            lambda: up.find(lambda line: line.get("event") == "ready"),
            what="up's ready line",
            progress=lambda: procs_progress([up]),
            stall_s=60,
            explain=up.tail,
            poll_s=0.2,
        )
        assert ready, up.tail()
    finally:
        rc = stop_proc(up)
    assert rc == 0, up.tail()
    assert up.find(lambda line: line.get("event") == "stopped"), up.tail()
    log = up.log_path.read_text(errors="replace")
    assert "ERROR" not in log and "Traceback" not in log, log[-3000:]


def test_a_missing_or_misshapen_trace_is_named_once(tmp_path, own_home):
    import pyarrow as pa
    import pyarrow.parquet as pq

    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), wrong)
    missing = tmp_path / "missing.parquet"
    said = {}
    for name, argv in {"score": ["score", str(missing)], "check": ["check", "--expect", str(wrong)]}.items():
        proc = faultlens_main(*argv)
        assert proc.returncode == 2, proc.stderr[-2000:]
        said[name] = proc.stderr.strip().splitlines()[-1]
    # score looked for the labels of a trace that is not there and said only that (issue: O6 walk-through)
    assert said["score"] == f"faultlens score: {missing}: no such trace"
    assert said["check"].startswith(f"faultlens check: {wrong}: not a faultlens trace")
    assert said["check"].count(str(wrong)) == 1
    proc = faultlens_main("keys", "show", wrong)
    assert proc.returncode == 1 and proc.stderr.count(str(wrong)) == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"faultlens keys show: {wrong}: not a PEM"), proc.stderr[-2000:]
    thresholds = tmp_path / "t.toml"
    thresholds.write_text("[wave]\nwindow_s = 0\n")
    proc = faultlens_main("rules", "diff", "--db", wrong, "--thresholds", thresholds)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"faultlens rules diff: {wrong}: not a faultlens history"), proc.stderr[-2000:]


def test_a_config_file_or_setting_given_wrong_is_one_line_and_exit_2(tmp_path, own_home):
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\nbootstrap =\n")
    cases = [
        (["status", "--config", str(tmp_path / "none.toml")], {}, "does not exist"),
        (["diagnose", "--config", str(bad)], {}, "is not valid TOML"),
        (["status"], {"FAULTLENS_SESSION_TIMEOUT_MS": "abc"}, "must be a whole number"),
    ]
    for argv, env, words in cases:
        with own_home.context() as case:
            for name, value in env.items():
                case.setenv(name, value)
            proc = faultlens_main(*argv)
        assert proc.returncode == 2, (argv, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and words in proc.stderr, (argv, proc.stderr[-2000:])
        assert proc.stderr.strip().splitlines()[-1].startswith(f"faultlens {argv[0]}: "), proc.stderr[-2000:]


@pytest.mark.broker
def test_tail_of_a_job_nobody_runs_says_what_it_follows_and_that_nothing_came(kafka_settings, tmp_path):
    # Before: a misnamed job printed nothing at all, for --duration or forever.
    job = f"nobody-{tmp_path.name}"
    proc = run_watched([sys.executable, "-m", "faultlens", "tail", job, "--duration", "1", "--bootstrap",
                        kafka_settings.bootstrap], env=_env(tmp_path), stall_s=60, cpu=True, limit_s=280)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr[-2000:]
    assert f"following job {job} on {kafka_settings.bootstrap}" in proc.stderr, proc.stderr[-2000:]
    assert f"nothing from job {job}" in proc.stderr and "faultlens status" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.broker
def test_collect_names_the_logs_it_was_given_that_are_not_there(kafka_settings, tmp_path):
    # A mistyped --kernel-log or a --trainer-log glob that matches nothing read as a quiet machine.
    kernel, pattern = tmp_path / "kern.log", str(tmp_path / "train-*.log")
    proc = run_watched([sys.executable, "-m", "faultlens", "collect", "--job", "j", "--node", "n", "--no-nvml",
                        "--no-net", "--kernel-log", str(kernel), "--trainer-log", pattern, "--duration", "1",
                        "--bootstrap", kafka_settings.bootstrap], env=_env(tmp_path), stall_s=60, cpu=True,
                       limit_s=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"faultlens collect: kernel log {kernel} does not exist (yet)" in proc.stderr, proc.stderr[-2000:]
    assert f"faultlens collect: trainer log {pattern} matches no file (yet)" in proc.stderr, proc.stderr[-2000:]
