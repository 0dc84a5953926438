"""One broker per machine, as a user runs it: `faultlens up` with no --bootstrap starts the embedded
broker and registers it in $FAULTLENS_HOME/broker.json; a `faultlens collect` started beside it
finds it there, and the Xid 79 written to the node's kernel log is diagnosed. Commands that only
produce or consume never start a private broker (events sent into one nobody reads are lost while
the sender reports them delivered): with none they say so and exit non-zero."""

from __future__ import annotations

import json
import os
import sys

import pytest

from faultlens.demo import processes as pipeline
from faultlens.streams.broker import free_port
from tests.in_process import faultlens_main
from tests.progress import files_size, procs_progress, run_watched, stop_proc, wait_until

XID_79 = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"


def _env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FAULTLENS_BOOTSTRAP", "FAULTLENS_CONFIG")}
    return {**env, "FAULTLENS_HOME": str(tmp_path / "home"), "FAULTLENS_LOG_LEVEL": "INFO"}


def _decisions(home) -> list[dict]:
    try:
        return [json.loads(line) for line in (home / "remediation-decisions.jsonl").read_text().splitlines() if line]
    except OSError:
        return []


@pytest.mark.broker
def test_up_and_collect_side_by_side_share_one_broker_and_the_xid_is_diagnosed(tmp_path):
    env, home = _env(tmp_path), tmp_path / "home"
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    up = pipeline.faultlens("up", ["up", "--db", str(tmp_path / "h.duckdb"), "--grace", "5"], env, tmp_path)
    collect = None

    def until(condition, what: str):
        """Waited for while the processes print, log (at INFO) or write (decisions, the history): a
        minute of none of it fails, never a fixed time a busy machine outruns."""
        procs = [p for p in (up, collect) if p is not None]
        written = (home / "remediation-decisions.jsonl", tmp_path / "h.duckdb")
        return wait_until(condition, progress=lambda: (procs_progress(procs), files_size(*written)), stall_s=60,
                          what=what, explain=lambda: "\n".join(p.tail() for p in procs), poll_s=0.2)

    try:
        ready = until(lambda: up.find(lambda line: line.get("event") == "ready"), "up's ready line")
        assert ready, up.tail()
        registered = json.loads((home / "broker.json").read_text())
        assert registered["bootstrap"] == ready[0]["bootstrap"]

        collect = pipeline.faultlens("collect", ["collect", "--job", "realjob", "--node", "n1", "--no-nvml", "--no-net",
                                                 "--kernel-log", str(kernel_log), "--heartbeat-interval", "2"],
                                     env, tmp_path)
        started = until(lambda: collect.find(lambda line: line.get("event") == "started"), "collect's started line")
        assert started, collect.tail()
        assert started[0]["bootstrap"] == registered["bootstrap"]  # the same broker, not a private one
        with kernel_log.open("a") as fh:
            fh.write(XID_79)
        decided = until(lambda: [d for d in _decisions(home) if d["job"] == "realjob" and d["fault"] == "gpu_lost"],
                        "remediation's decision on the Xid 79")
        assert decided, up.tail() + collect.tail()
        assert decided[0]["nodes"] == ["n1"] and decided[0]["action"] == "evict"
        assert "private" not in collect.tail() and "started an embedded" not in collect.tail()
    finally:
        if collect is not None:
            collect.stop()
        # Waited for while it stops (writing the history, stopping its broker), not 30 s (issue 47).
        assert stop_proc(up) == 0, up.tail()
    assert not (home / "broker.json").exists()  # unregistered when `up` stopped its broker


@pytest.mark.parametrize("argv", [["collect", "--job", "j", "--no-nvml", "--no-kernel", "--no-net"],
                                  ["replay", "no-such.parquet"], ["record", "--out", "x.parquet", "--duration", "1"],
                                  ["diagnose"], ["remediate"], ["history"]])
def test_without_a_broker_a_command_says_so_and_exits_non_zero(argv, tmp_path, monkeypatch):
    # In this process (tests/in_process.py; the two tests below run the real command): six
    # interpreters started only to print one line were ~0.6 CPU-s and seconds each on a loaded machine.
    monkeypatch.setenv("FAULTLENS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FAULTLENS_LOG_LEVEL", "INFO")
    for name in ("FAULTLENS_BOOTSTRAP", "FAULTLENS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    proc = faultlens_main(*argv)
    assert proc.returncode != 0
    assert "no broker to talk to" in proc.stderr and "faultlens up" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "home" / "broker.json").exists()


def test_a_registered_broker_that_is_gone_is_named(tmp_path):
    env = _env(tmp_path)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "broker.json").write_text(json.dumps({"bootstrap": f"127.0.0.1:{free_port()}", "pid": 1}))
    proc = run_watched([sys.executable, "-m", "faultlens", "diagnose"], env=env, stall_s=60, cpu=True, limit_s=280)
    assert proc.returncode == 1 and "which is not answering" in proc.stderr, proc.stderr[-2000:]


def test_collect_with_a_down_bootstrap_keeps_spooling_and_says_so(tmp_path):
    down = f"127.0.0.1:{free_port()}"
    proc = run_watched([sys.executable, "-m", "faultlens", "collect", "--bootstrap", down, "--job", "j", "--node", "n",
                        "--no-nvml", "--no-kernel", "--no-net", "--heartbeat-interval", "0.5", "--duration", "3"],
                       env=_env(tmp_path), stall_s=60, cpu=True, limit_s=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"no broker answers at {down}: spooling events" in proc.stderr
    stopped = json.loads(proc.stdout.strip().splitlines()[-1])
    assert stopped["delivered"] == 0 and stopped["lost"] == 0 and stopped["spool_waiting"] > 0
