"""A live job read by split stages whose node-stage members are SIGKILLed (issue 32): one, then the
other, and none restarted for two minutes; a node really dies during the outage; then the job ends
with every node stopping at once. No healthy machine is evicted, the dead one is, the acting
diagnoses are `faultlens analyze`'s, and the outage is named as the pipeline's."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

from faultlens.diagnosis.consumer import diagnose_consumer
from faultlens.diagnosis.engine import EngineConfig, analyze
from faultlens.diagnosis.scoring import EVICTING
from faultlens.demo.processes import faultlens
from faultlens.streams.diagnosis_record import Diagnosis
from faultlens.streams.producer import Producer
from faultlens.streams.replay import replay_trace
from faultlens.streams.trace import write_trace
from tests.diagnosis import foreign
from tests.diagnosis.sim_replay import acting
from tests.kafka_fixtures import job_records

pytestmark = [pytest.mark.broker, pytest.mark.e2e]


def _at(t0: float, second: float) -> None:
    time.sleep(max(0.0, t0 + second - time.monotonic()))


@pytest.mark.long(230)
@pytest.mark.timeout(600)
def test_e2e_node_stage_members_killed_for_two_minutes_evict_no_healthy_machine(own_kafka_settings, tmp_path):
    settings = own_kafka_settings
    case = foreign.load("node_dies_16_phased")
    offline = analyze(case.events)
    assert [(d.fault, d.action, d.nodes) for d in offline if d.action in EVICTING] == [
        ("node_silent", "evict", ("h100-06",))]
    path = tmp_path / "live.parquet"
    write_trace(path, case.events)

    tag = uuid.uuid4().hex[:6]
    runner, handler = diagnose_consumer(settings, EngineConfig(grace_s=5.0), stage="job", group=f"live-job-{tag}")
    job_thread = threading.Thread(target=runner.run, kwargs={"handle_signals": False}, daemon=True)
    job_thread.start()
    argv = ["diagnose", "--stage", "node", "--bootstrap", settings.bootstrap, "--group", f"live-node-{tag}"]
    env = dict(os.environ)
    procs = [faultlens(f"node{i}", argv, env, tmp_path) for i in range(2)]
    try:
        time.sleep(8)  # both joined
        replay = threading.Thread(target=replay_trace, args=(settings, path), kwargs={"speed": 1.0, "show_progress": False},
                                  daemon=True)
        t0 = time.monotonic()
        replay.start()
        _at(t0, 15)
        os.killpg(procs[0].popen.pid, signal.SIGKILL)  # the other takes its partitions over
        _at(t0, 30)
        os.killpg(procs[1].popen.pid, signal.SIGKILL)  # no node stage at all: h100-06 dies at 60 s
        _at(t0, 150)
        procs.append(faultlens("node-again", argv, env, tmp_path))  # two minutes later
        replay.join(120)
        assert not replay.is_alive()
        _at(t0, 215)  # the job ended at 170 s: the job stage's wall clock moves its time on
    finally:
        for p in procs:
            p.stop()
    with Producer(settings) as producer:
        runner.stop()
        job_thread.join(60)
        producer.send_all(handler.flush())
        producer.flush()

    live = job_records(settings, "diagnoses", Diagnosis.decode, case.job, idle_s=1.5)
    shown = [(d.fault, d.action, d.nodes, round(d.ts - foreign.T0), d.detail[:100]) for d in live]
    assert acting(live) == acting(offline), shown
    assert {n for d in live if d.action in EVICTING for n in d.nodes} == {"h100-06"}, shown
    lost = [d for d in live if d.fault == "telemetry_lost"]
    assert any("no node-stage member has announced progress" in d.detail for d in lost), shown
    assert any("no node of the job reported" in d.detail for d in lost), shown
