"""`faultlens collect` with no broker: it spools, says so once, and its Kafka clients stay quiet.

Its command listeners (stack capture, checks) made a Kafka consumer every retry: kafka-python blocked
for its bootstrap timeout (30 s, past the agent's own stop) and logged each failed connection at
ERROR, ~70 lines a minute on every node of a fleet while the broker was away. The listener now
probes the broker before it makes a client (streams/command_listener.py)."""

from __future__ import annotations

import json
import os
import sys

from faultlens.events.signing import write_key_pair
from faultlens.streams.local_port import free_port
from tests.progress import run_watched

STALL_S, LIMIT_S = 60, 280


def test_collect_with_no_broker_spools_says_it_once_and_stops_in_time(tmp_path):
    _, public = write_key_pair(tmp_path / "keys")
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path)}
    argv = [
        sys.executable,
        "-m",
        "faultlens",
        "collect",
        "--bootstrap",
        dead,
        "--job",
        "j",
        "--node",
        "n1",
        "--no-kernel",
        "--no-nvml",
        "--no-net",
        "--no-fabric-manager",
        "--verify-key",
        str(public),
        "--heartbeat-interval",
        "0.2",
        "--duration",
        "4",
        "--spool-dir",
        str(tmp_path / "spool"),
    ]
    out = run_watched(argv, env=env, stall_s=STALL_S, cpu=True, limit_s=LIMIT_S)
    assert out.returncode == 0, out.stderr[-3000:]
    stopped = json.loads(out.stdout.strip().splitlines()[-1])
    assert stopped["event"] == "stopped" and stopped["delivered"] == 0 and stopped["spool_waiting"] >= 3
    assert stopped["lost"] == 0 and stopped["spool_dropped"] == 0
    assert out.stderr.count("no broker answers at") == 1
    # No client's reconnect lines, and every source stopped with the agent (none left blocked in a bootstrap).
    assert " ERROR kafka" not in out.stderr, out.stderr[-3000:]
    assert "did not stop in time" not in out.stderr, out.stderr[-3000:]
