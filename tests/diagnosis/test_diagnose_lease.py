"""Replicas of `faultlens diagnose` (stage all) in one group: one active member, the others hot
standbys (streams/lease.py). Two real processes on a real broker: one holds the lease and runs the
pipeline, the other stands by reading nothing; SIGKILLed, the active one hands the lease to the
standby once its session times out, and the standby runs the pipeline from then on."""

from __future__ import annotations

import os
import signal
import urllib.request
import uuid

import pytest

from faultlens.demo.processes import faultlens
from faultlens.streams.local_port import free_port
from tests.progress import procs_progress, stop_proc, wait_until

pytestmark = pytest.mark.broker

HOLDING = "this member runs the pipeline"
STANDING_BY = "standing by"
STALL_S = 90.0


def _lease_held(port: int) -> str:
    """The member's `faultlens_lease_held` as its /metrics says it."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return next(line.split()[-1] for line in text.splitlines() if line.startswith("faultlens_lease_held{"))


@pytest.mark.long(60)
def test_two_stage_all_members_one_acts_and_killing_it_hands_over(own_kafka_settings, tmp_path):
    settings = own_kafka_settings
    group = f"test-lease-{uuid.uuid4().hex[:6]}"
    argv = ["diagnose", "--bootstrap", settings.bootstrap, "--group", group]
    env = {**os.environ, "FAULTLENS_LOG_LEVEL": "WARNING"}
    ports = [free_port() for _ in range(2)]
    procs = [faultlens(f"member{i}", [*argv, "--metrics-port", str(port)], env, tmp_path)
             for i, port in enumerate(ports)]
    try:
        def roles():
            return [(HOLDING in p.tail(100_000), STANDING_BY in p.tail(100_000)) for p in procs]

        # Waits end on what they wait for, or fail once no member printed or logged anything for
        # STALL_S: never at a fixed time a loaded machine outruns.
        settled = wait_until(lambda: sorted(roles()) == [(False, True), (True, False)], what="one active, one standby",
                             progress=lambda: procs_progress(procs), stall_s=STALL_S)
        assert settled, [p.tail() for p in procs]
        first_active = roles()[0][0]
        active, standby = (procs[0], procs[1]) if first_active else (procs[1], procs[0])
        active_port, standby_port = (ports[0], ports[1]) if first_active else (ports[1], ports[0])
        assert standby.popen.poll() is None and not standby.lines, standby.tail()
        assert (_lease_held(active_port), _lease_held(standby_port)) == ("1.0", "0.0")

        os.killpg(active.popen.pid, signal.SIGKILL)
        active.popen.wait(10)
        assert wait_until(lambda: HOLDING in standby.tail(100_000), what="the standby's takeover",
                          progress=lambda: procs_progress([standby]), stall_s=STALL_S), standby.tail()
        assert standby.popen.poll() is None, standby.tail()
        assert _lease_held(standby_port) == "1.0"
    finally:
        # Its clean stop (the pipeline's flush and commit, the lease handed on) waited for while it
        # moves: 2.4 s here, past Proc.stop's 10 s on CI's busy cores (killed, -9, at stop 68).
        for p in procs:
            stop_proc(p)
    # Stopped, the new active member ends as a pipeline member does (its run's counts, exit 0),
    # not as a standby that never got the lease ({"standby": true}).
    assert standby.popen.returncode == 0, standby.tail()
    assert [line.get("standby", False) for line in standby.lines] == [False], standby.lines
