import json
import os
import signal
import sys
import time

import pytest

from faultlens.events.envelope import Envelope
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.streams.reader import read_topic
from tests.progress import Watched, run_watched

pytestmark = pytest.mark.broker


def test_faultlens_broker_prints_its_address_serves_and_stops(tmp_path):
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path)}
    # Its address line and its stop waited for while it moves (prints, computes), not a fixed time (issue 47).
    with Watched([sys.executable, "-m", "faultlens", "broker"], env=env, cpu=True) as proc:
        info = json.loads(proc.wait_line(lambda line: line.startswith("{"), stall_s=60, limit_s=240))
        bootstrap = info["bootstrap"]
        assert bootstrap.startswith("127.0.0.1:")
        assert json.loads((tmp_path / "broker.json").read_text())["bootstrap"] == bootstrap
        settings = KafkaSettings(bootstrap=bootstrap)
        ev = Envelope(ts=time.time(), job="cli", node="n0", source="heartbeat", kind="beat", data={"seq": 1})
        with Producer(settings) as p:
            p.send_event(ev)
            p.flush()
        got = read_topic(settings, "telemetry.heartbeat", idle_s=1.0)
        assert [json.loads(r.value)["id"] for r in got] == [ev.id]
        done = proc.stop(signal.SIGTERM, stall_s=60, limit_s=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "broker.json").exists()


def test_commands_without_bootstrap_find_the_running_broker(tmp_path, broker, monkeypatch):
    from faultlens.streams.broker import resolve_bootstrap, state_file

    monkeypatch.setenv("FAULTLENS_HOME", str(tmp_path))
    state_file().write_text(json.dumps({"bootstrap": broker.bootstrap, "pid": broker.proc.pid}))
    bootstrap, owned = resolve_bootstrap(None)
    assert bootstrap == broker.bootstrap and owned is None
    # an explicit address always wins
    assert resolve_bootstrap("kafka:9092") == ("kafka:9092", None)


def test_help_lists_every_command():
    from faultlens.commands import COMMAND_NAMES

    proc = run_watched([sys.executable, "-m", "faultlens", "--help"], stall_s=60, cpu=True, limit_s=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    for name in COMMAND_NAMES:
        assert f"    {name}" in out
