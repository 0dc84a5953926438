"""The reference launcher trains with no broker: the operator side costs telemetry, never steps.

Before, its command listener and producer were made in the launcher's constructor and kafka-python
failed to bootstrap after 30 s (KafkaTimeoutError): the job never started. Now it starts at once,
restarts as its children's exit codes say, spools its restart and end events and says so once."""

import json
import os
import sys

from faultlens.events.signing import write_key_pair
from faultlens.streams.local_port import free_port
from tests.progress import run_watched

STALL_S = 90.0


def test_the_launcher_trains_and_restarts_with_no_broker(tmp_path):
    _, public = write_key_pair(tmp_path / "keys")
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, "FAULTLENS_STATE_DIR": str(tmp_path / "state")}
    env.pop("FAULTLENS_BOOTSTRAP", None)
    out = run_watched(
        [
            sys.executable,
            "-m",
            "faultlens.trainer_hooks.launcher",
            "--job",
            "no-broker",
            "--nodes",
            "2",
            "--bootstrap",
            dead,
            "--verify-key",
            str(public),
            "--trainer",
            "tests.trainer_hooks.exiting_trainer",
            "--node-arg",
            "",
            "--command-wait",
            "0.5",
            "--crash-wait",
            "0.5",
            "--grace",
            "0.5",
            "--",
            "--codes",
            "77,0",
            "--together",
            str(tmp_path / "started"),
        ],
        env=env,
        stall_s=STALL_S,
        cpu=True,
        watch=[tmp_path],
        limit_s=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    # The first attempt's rollback exit code is obeyed without a command, as with a broker.
    assert [line["event"] for line in lines] == ["start", "restart", "start", "done"]
    assert lines[1]["action"] == "rollback" and lines[2]["resume"] == "rollback"
    # Said once each, in words the user can act on; no client's traceback.
    assert out.stderr.count("no broker answers at") == 1 and "training starts anyway" in out.stderr
    assert "2 not (broker unreachable" in out.stderr  # the restart and the end, spooled and counted at close
    assert "Traceback" not in out.stderr and "KafkaTimeoutError" not in out.stderr
