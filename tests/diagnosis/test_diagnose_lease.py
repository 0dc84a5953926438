"""Replicas of `faultlens diagnose` (stage all) in one group: one active member, the others hot
standbys (streams/lease.py). Two real processes on a real broker: one holds the lease and runs the
pipeline, the other stands by reading nothing; SIGKILLed, the active one hands the lease to the
standby once its session times out, and the standby runs the pipeline from then on."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from faultlens.demo.processes import faultlens, wait_until

pytestmark = pytest.mark.broker

HOLDING = "this member runs the pipeline"
STANDING_BY = "standing by"


@pytest.mark.long(60)
def test_two_stage_all_members_one_acts_and_killing_it_hands_over(own_kafka_settings, tmp_path):
    settings = own_kafka_settings
    group = f"test-lease-{uuid.uuid4().hex[:6]}"
    argv = ["diagnose", "--bootstrap", settings.bootstrap, "--group", group]
    env = {**os.environ, "FAULTLENS_LOG_LEVEL": "WARNING"}
    procs = [faultlens(f"member{i}", argv, env, tmp_path) for i in range(2)]
    try:
        def roles():
            return [(HOLDING in p.tail(100_000), STANDING_BY in p.tail(100_000)) for p in procs]

        settled = wait_until(lambda: sorted(roles()) == [(False, True), (True, False)], timeout=90)
        assert settled, [p.tail() for p in procs]
        active, standby = (procs[0], procs[1]) if roles()[0][0] else (procs[1], procs[0])
        assert standby.popen.poll() is None and not standby.lines, standby.tail()

        os.killpg(active.popen.pid, signal.SIGKILL)
        active.popen.wait(10)
        assert wait_until(lambda: HOLDING in standby.tail(100_000), timeout=90), standby.tail()
        assert standby.popen.poll() is None, standby.tail()
    finally:
        for p in procs:
            p.stop()
    # Stopped, the new active member ends as a pipeline member does (its run's counts, exit 0),
    # not as a standby that never got the lease ({"standby": true}).
    assert standby.popen.returncode == 0, standby.tail()
    assert [line.get("standby", False) for line in standby.lines] == [False], standby.lines
