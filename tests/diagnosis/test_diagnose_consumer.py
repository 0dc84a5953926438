"""`faultlens diagnose` on the real embedded broker: telemetry in, diagnoses and dead letters out."""

import json
import uuid

import orjson
import pytest

from tests.kafka_fixtures import job_records

from streams.diagnosis_record import Diagnosis
from faultlens.cli import main
from streams.producer import Producer
from streams.reader import read_topic
from tests.diagnosis.diag_events import ev, topology, xid


@pytest.mark.broker
def test_diagnose_consumer_publishes_diagnoses_and_dead_letters(kafka_settings, group_name, capsys):
    job = f"job-{uuid.uuid4().hex[:8]}"
    producer = Producer(kafka_settings)
    producer.send_event(topology(n=4, gpus=2, job=job))
    for i in range(300):  # one node floods Xid 95
        producer.send_event(_job(xid(10 + i * 0.01, "n002", 95, "gpu_memory", "evict_reset_gpu"), job))
    line = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python3, GPU has fallen off the bus."
    producer.send_event(ev(20, "n001", "kernel", "line", job=job, line=line))
    producer.send_event(ev(21, "n003", "kernel", "xid", job=job, pci="0000:3b:00"))  # no xid code
    producer.send("telemetry.kernel", b"n003", b"{not json")
    producer.flush()
    producer.close()

    rc = main(["diagnose", "--bootstrap", kafka_settings.bootstrap, "--group", group_name, "--idle-stop", "3"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["records"] >= 303 and summary["dead_letters"] >= 2

    mine = job_records(kafka_settings, "diagnoses", Diagnosis.decode, job, idle_s=1.5)
    by_fault = {}
    for d in mine:
        by_fault.setdefault(d.fault, []).append(d)
    assert [(d.nodes, d.action) for d in by_fault["gpu_lost"]] == [(("n001",), "evict")]
    memory = by_fault["gpu_memory"]
    assert {d.id for d in memory} == {memory[0].id}  # one diagnosis; the later copy carries the final count
    assert max(d.count for d in memory) == 300

    dead = [orjson.loads(m.value) for m in read_topic(kafka_settings, "dead-letter", idle_s=1.5)]
    reasons = [d["reason"] for d in dead if d.get("group") == group_name]
    assert any("data.xid" in r for r in reasons)
    assert any("not valid JSON" in r for r in reasons)


def _job(event, job):
    d = event.to_dict()
    d["job"] = job
    return type(event).from_dict(d)
