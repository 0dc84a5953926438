"""On the real broker: a diagnosis → the remediation group acts through its actuator → the
outcome on `actions` → the history group stores it."""

from __future__ import annotations

import sys
import time
import uuid

import pytest

from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.history.consumer import history_runner
from faultlens.history.schema import open_history
from faultlens.remediation.actuators.script import ScriptActuator, ScriptConfig
from faultlens.remediation.consumer import DECODERS, RemediationHandler
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig
from faultlens.streams.admin import ensure_topics
from faultlens.streams.producer import Producer
from faultlens.streams.runner.loop import GroupRunner

pytestmark = pytest.mark.broker


def test_actions_travel_from_the_remediation_group_to_the_history(kafka_settings, group_name, tmp_path):
    ensure_topics(kafka_settings)
    job = f"act-{uuid.uuid4().hex[:8]}"
    nodes = ["a0", "a1", "a2", "a3"]
    now = time.time()
    d = Diagnosis(job=job, ts=now, onset=now, fault="gpu_lost", action="evict", nodes=("a2",), confidence=0.95)
    with Producer(kafka_settings) as p:
        p.send_event(Topology.grid(nodes, 1, 1, 2, 2).to_event(job, now))
        p.send(topics.DIAGNOSES, job.encode(), d.encode())
        p.flush()

    seen = tmp_path / "ops.txt"
    actuator = ScriptActuator(ScriptConfig(
        f"{sys.executable} -c \"import json,sys; r=json.load(sys.stdin); "
        f"open({str(seen)!r}, 'a').write(r['op'] + ' ' + ','.join(r['nodes']) + '\\n'); print('done', r['op'])\"", 20))
    policy = Policy(SigningKey.generate(), PolicyConfig(act_on=frozenset({job})),
                    Safety(SafetyConfig(max_job_share=0.5, breaker_share=0.9), CircuitBreaker(None)))
    handler = RemediationHandler(policy, group=group_name, actuator=actuator)
    GroupRunner(kafka_settings, group_name, [topics.DIAGNOSES, topics.JOBS], handler, DECODERS).run(
        idle_stop_s=2.0, handle_signals=False)
    assert seen.read_text().splitlines() == ["take_out a2", "requeue a2"]

    conn = open_history(tmp_path / "h.duckdb", create=True)
    runner, _ = history_runner(kafka_settings, conn, group=f"{group_name}-h", topics=(topics.ACTIONS,))
    runner.run(idle_stop_s=2.0, handle_signals=False)
    rows = conn.execute("SELECT op, outcome, actuator, diagnosis_id, detail FROM actions WHERE job = ? ORDER BY ts",
                        [job]).fetchall()
    assert rows == [("take_out", "ok", "script", d.id, "done take_out"), ("requeue", "ok", "script", d.id, "done requeue")]
