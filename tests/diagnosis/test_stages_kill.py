"""A `faultlens diagnose --stage job` process SIGKILLed mid-stream and started again (issue 11): its
partitions move, the state is rebuilt from retained input, and the acting diagnoses are still the
offline ones. (Apart from tests/diagnosis/test_stages.py so that the test runner can spread them.)"""

from __future__ import annotations

import uuid

import pytest

from bench.testbed.backlog_split import start_members
from faultlens.diagnosis.replay.scoring import is_scored
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.simulator import FaultPlan
from faultlens.streams.replay import replay_trace
from tests.diagnosis.live_members import LIVE_JOB_IDLE_S, finish_node_members
from tests.diagnosis.sim_replay import acting, offline_trace
from tests.kafka_fixtures import job_records

pytestmark = pytest.mark.broker


@pytest.mark.e2e
@pytest.mark.long(50)
def test_e2e_a_job_stage_member_killed_mid_stream_changes_nothing(own_kafka_settings, tmp_path):
    kafka_settings = own_kafka_settings
    """Two `faultlens diagnose --stage job` processes; one is SIGKILLed while the node stage is
    still writing and started again: its partitions move, the state is rebuilt from retained
    input, and the acting diagnoses are still the offline ones."""
    import os
    import signal
    import time

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
    first, second = (faultlens(f"job{i}", argv, env, tmp_path) for i in range(2))
    procs = [first, second]
    try:
        time.sleep(8)  # both joined the group
        replay_trace(kafka_settings, path, speed=0, show_progress=False)
        node_group = f"test-knode-{uuid.uuid4().hex[:6]}"
        nodes = start_members(kafka_settings, "node", 1, node_group, idle_s=6)
        time.sleep(1.5)
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
