"""Two node-stage and two job-stage diagnosis members reading a replayed trace: as a backlog (in
this process, bench.testbed.backlog_split) or live (`faultlens diagnose` processes started before
the trace is replayed), the two halves of the split-stage equivalence tests."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from bench.testbed.backlog_split import finish_members, start_members
from faultlens.demo.processes import faultlens
from faultlens.events import topics
from faultlens.events.envelope import decode
from faultlens.streams.replay import replay_trace
from tests.kafka_fixtures import wait_for_records


def run_two_and_two_live(settings, trace: Path, workdir: Path, prefix: str) -> None:
    """Start two node-stage and two job-stage members (groups ``<prefix>n-*`` / ``<prefix>j-*``),
    replay ``trace`` at full speed, and wait for every member to stop on its own when idle."""
    tag = uuid.uuid4().hex[:6]
    env = dict(os.environ)
    stage = ["diagnose", "--bootstrap", settings.bootstrap, "--stage"]
    procs = [faultlens(f"node{i}", [*stage, "node", "--group", f"{prefix}n-{tag}", "--idle-stop", "15"], env, workdir)
             for i in range(2)]
    try:
        # The node stage has joined once its members said their first word downstream.
        wait_for_records(settings, topics.SUMMARIES, decode, "-", bool, timeout_s=120, progress=len)
        procs += [faultlens(f"job{i}", [*stage, "job", "--group", f"{prefix}j-{tag}", "--idle-stop", "30"], env, workdir)
                  for i in range(2)]
        replay_trace(settings, trace, speed=0, show_progress=False)
        for p in procs:
            assert p.popen.wait(300) == 0, p.tail()
    finally:
        for p in procs:
            p.stop()


def run_two_and_two_backlog(settings, trace: Path, prefix: str) -> list:
    """Replay ``trace`` first, then let two node-stage and two job-stage members (groups
    ``<prefix>-node-*`` / ``<prefix>-job-*``) read it as a backlog until idle; the job members
    (start_members' tuples) are returned for what they held."""
    tag = uuid.uuid4().hex[:6]
    replay_trace(settings, trace, speed=0, show_progress=False)
    nodes = start_members(settings, "node", 2, f"{prefix}-node-{tag}", idle_s=6)
    wait_for_records(settings, topics.SUMMARIES, decode, "-", bool, timeout_s=60, progress=len)
    jobs = start_members(settings, "job", 2, f"{prefix}-job-{tag}", idle_s=25)
    finish_members(settings, nodes)
    finish_members(settings, jobs, together=True)
    return jobs
