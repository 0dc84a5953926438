"""The reference launcher with its broker killed mid-run (SIGKILL: no goodbye to any client): the
job trains to its end, and the launcher says the broker is lost in one line of its own, where its
Kafka clients said it in ~30 ERROR lines within seconds (before trainer_hooks/outbox_voice.py was
put over them). The ranks run until the test has read that line, so the clients have had their
say before the job ends, however slow the machine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid

import pytest

from faultlens.events.signing import write_key_pair
from tests.helpers.own_broker import own_broker
from tests.progress import cpu_ticks, wait_until
from tests.trainer_hooks.launcher_lines import follow, until

pytestmark = [pytest.mark.broker, pytest.mark.long(40)]

STALL_S = 90.0  # the launcher printed and computed nothing for this long: stuck, not slow
LOST = "lost: training goes on"


def test_a_broker_killed_mid_run_is_one_line_of_the_launchers_and_the_job_ends_well(tmp_path):
    _, public = write_key_pair(tmp_path / "keys")
    go = tmp_path / "go"
    with own_broker(tmp_path) as broker:
        env = {**os.environ, "FAULTLENS_BOOTSTRAP": broker.bootstrap, "FAULTLENS_STATE_DIR": str(tmp_path / "state")}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faultlens.trainer_hooks.launcher",
                "--job",
                f"killed-{uuid.uuid4().hex[:8]}",
                "--nodes",
                "2",
                "--verify-key",
                str(public),
                "--trainer",
                "tests.trainer_hooks.exiting_trainer",
                "--node-arg",
                "",
                "--grace",
                "0.5",
                "--",
                "--codes",
                "0",
                "--until",
                str(go),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
        reader.start()
        try:
            seen: list[dict] = []
            lines = follow(proc)
            until(lines, "start", STALL_S, seen)
            # The listener has its consumer: the loss is of a broker it was reading.
            wait_until(
                lambda: any("listening for commands" in line for line in err),
                progress=lambda: len(err),
                stall_s=STALL_S,
                what="the listener's first connection",
                explain=lambda: "".join(err[-20:]),
            )
            # Counted before the kill: the launcher answers the kill at once (its clients' sockets are
            # reset or closed as the kernel closes the broker's), and on a loaded machine its first lines
            # were read in before a count taken after the broker was reaped.
            at_kill = len(err)
            broker.proc.kill()
            broker.proc.wait()
            # Its clients notice on their own clock (reconnects, a metadata refresh): waited for by the
            # launcher's CPU, which their retries move, never by a clock of the test's.
            wait_until(
                lambda: any(LOST in line for line in err[at_kill:]),
                progress=lambda: (len(err), cpu_ticks(proc.pid)),
                stall_s=STALL_S,
                what="the launcher's line saying the broker is lost",
                explain=lambda: "".join(err[-20:]),
            )
            go.touch()
            end = until(lines, "done", STALL_S, seen)
            assert proc.wait(timeout=STALL_S) == 0 and end["event"] == "done"
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(timeout=10)
    after = err[at_kill:]
    assert sum(LOST in line for line in after) == 1, "".join(after)
    # Nothing of the clients' own at WARNING or above, and no traceback.
    loud = [
        line
        for line in after
        if (" ERROR " in line or " WARNING " in line) and LOST not in line and "faultlens.trainer_hooks.outbox" not in line
    ]
    assert loud == [], "".join(loud)
    assert "Traceback" not in "".join(err)
