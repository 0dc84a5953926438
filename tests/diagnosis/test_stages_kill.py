"""A `faultlens diagnose --stage job` process SIGKILLed mid-stream and started again (issue 11): its
partitions move, the state is rebuilt from retained input, and the acting diagnoses are still the
offline ones. (Apart from tests/diagnosis/test_stages.py so that the test runner can spread them.)"""

from __future__ import annotations

import re
import urllib.request
import uuid

import pytest

from bench.testbed.backlog_split import start_members
from faultlens.diagnosis.replay.scoring import is_scored
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.simulator import FaultPlan
from faultlens.streams.local_port import free_port
from faultlens.streams.replay import replay_trace
from tests.diagnosis.live_members import LIVE_JOB_IDLE_S, finish_node_members
from tests.diagnosis.sim_replay import acting, offline_trace
from tests.kafka_fixtures import job_records
from tests.progress import cpu_ticks, wait_until

pytestmark = pytest.mark.broker

READ = re.compile(r'^faultlens_events_in_total\{consumer="diagnose-job"\} (\S+)$', re.M)


def _records_in(port: int) -> int | None:
    """A `faultlens diagnose --stage job --metrics-port PORT` member's records read (its /metrics);
    None while it serves none yet. kafka-python's describe_groups fails on Tansu ("15 is not a valid
    ACLOperation") and the job stage logs nothing of its assignment: what each member read says
    that it joined and holds partitions."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            m = READ.search(r.read().decode())
    except OSError:
        return None
    return int(float(m.group(1))) if m else None


@pytest.mark.e2e
@pytest.mark.long(50)
def test_e2e_a_job_stage_member_killed_mid_stream_changes_nothing(own_kafka_settings, tmp_path):
    kafka_settings = own_kafka_settings
    """Two `faultlens diagnose --stage job` processes; one is SIGKILLed while the node stage is
    still writing and started again: its partitions move, the state is rebuilt from retained
    input, and the acting diagnoses are still the offline ones."""
    import os
    import signal

    from faultlens.demo.processes import faultlens

    job = f"kill-{uuid.uuid4().hex[:8]}"
    plan = FaultPlan().fail_at("gpu_lost", node="n001", t=60).fail_at("job_hang", node="n003", t=300)
    path, offline, _ = offline_trace(tmp_path, job, plan, seed=4)
    assert {"gpu_lost", "job_hang"} <= {d.fault for d in offline if is_scored(d)}

    group = f"test-kill-{uuid.uuid4().hex[:6]}"
    # The job processes end at their idle stop once the node member stopped: it says a word at
    # least every 5 s while it runs (tests/diagnosis/live_members.py, LIVE_JOB_IDLE_S).
    argv = ["diagnose", "--stage", "job", "--bootstrap", kafka_settings.bootstrap, "--group", group,
            "--idle-stop", str(LIVE_JOB_IDLE_S)]
    env = dict(os.environ)
    ports = [free_port() for _ in range(2)]
    first, second = (faultlens(f"job{i}", [*argv, "--metrics-port", str(port)], env, tmp_path)
                     for i, port in enumerate(ports))
    procs = [first, second]
    try:
        node_group = f"test-knode-{uuid.uuid4().hex[:6]}"
        # The node member first (its idle stop a backstop: it is stopped once it committed the
        # telemetry): with no telemetry yet it says a word every few seconds (KEEPALIVE_S), to
        # every `summaries` partition, so each job member that joined and owns partitions reads one.
        nodes = start_members(kafka_settings, "node", 1, node_group, idle_s=300)
        wait_until(lambda: all(n for n in map(_records_in, ports)),
                   progress=lambda: (tuple(map(_records_in, ports)), tuple(cpu_ticks(p.popen.pid) for p in procs),
                                     tuple(r.stats.records_in for _, r, _ in nodes)),
                   stall_s=90, what="both job members to join and read", explain=lambda: first.tail() + second.tail())
        replay_trace(kafka_settings, path, speed=0, show_progress=False)
        # Killed as the whole trace is in, while the node stage works through it: a member to take
        # its partitions over, and the restarted one joining later.
        os.killpg(first.popen.pid, signal.SIGKILL)
        first.popen.wait(10)
        procs.append(faultlens("job0-again", argv, env, tmp_path))
        finish_node_members(kafka_settings, nodes, node_group)  # stopped once it committed the telemetry
        for p in procs[1:]:
            assert p.popen.wait(180) == 0, p.tail()
    finally:
        for p in procs:
            p.stop()

    live = job_records(kafka_settings, "diagnoses", Diagnosis.decode, job, idle_s=1.5)
    assert acting(live) == acting(offline)
