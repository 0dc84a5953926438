"""`faultlens diagnose` on the real embedded broker: telemetry in, diagnoses and dead letters out."""

import json
import uuid

import orjson
import pytest

from faultlens.cli import main
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.streams.producer import Producer
from faultlens.streams.reader import read_topic
from tests.diagnosis.diag_events import ev, topology, xid
from tests.kafka_fixtures import job_records


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


def test_a_job_stage_member_forgets_a_job_whose_partition_moves_and_rebuilds_it_when_it_comes_back():
    """A job-stage member keeps no lane for a job it no longer reads (its wall clock would go on
    moving the job's time), and the retained input it reads again for a job that comes back is
    taken as input, not as copies of what it saw before."""
    from kafka.structs import TopicPartition

    from faultlens.diagnosis.edge.consumer import DiagnoseHandler
    from faultlens.diagnosis.engine.core import Engine, EngineConfig
    from faultlens.events import topics
    from faultlens.streams.runner.loop import Record
    from tests.diagnosis.diag_events import beat

    handler = DiagnoseHandler(Engine(EngineConfig(stage="job")))

    def records(job: str, partition: int) -> list:
        events = [beat(t, f"n{i:03d}", job=job) for t in (0, 5) for i in range(3)]
        return [Record(topics.SUMMARIES, partition, i, job.encode(), e, 0, event_ts=e.ts)
                for i, e in enumerate(events)]

    ja, jb = records("ja", 1), records("jb", 2)
    handler.handle(ja + jb)
    assert handler.engine.job_time("ja") is not None and handler.engine.job_time("jb") is not None
    handler.partitions_moved({TopicPartition(topics.SUMMARIES, 1), TopicPartition(topics.TRAIN, 2)})
    assert handler.engine.job_time("ja") is None and handler.engine.job_time("jb") is not None
    handler.handle(ja)  # it came back: read again from retained input
    assert handler.engine.job_time("ja") == ja[-1].value.ts
    assert handler.engine.stats["duplicates"] == 0
    handler.handle(jb)  # never moved: these are copies
    assert handler.engine.stats["duplicates"] == len(jb)


def test_copartition_problem_names_the_counts_that_differ():
    from faultlens.events.topics import TELEMETRY_TOPICS, TOPICS, copartition_problem

    assert {TOPICS[t].partitions for t in TELEMETRY_TOPICS} == {6}  # the defaults are co-partitioned
    assert copartition_problem({"telemetry.gpu": 6, "telemetry.train": 6}) is None
    problem = copartition_problem({"telemetry.gpu": 6, "telemetry.train": 3})
    assert "telemetry.gpu 6" in problem and "telemetry.train 3" in problem


@pytest.mark.broker
def test_the_node_stage_refuses_telemetry_topics_that_are_not_co_partitioned(tmp_path, caplog):
    """Two node-stage members would each see part of a node (its NVML samples on one, its steps
    on the other): the stage says so at start and does not run."""
    from faultlens.streams.admin import ensure_topics
    from faultlens.streams.broker import EmbeddedBroker
    from faultlens.streams.config import KafkaSettings

    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as b:
        ensure_topics(KafkaSettings(bootstrap=b.bootstrap, topics={"telemetry.train": {"partitions": 3}}))
        rc = main(["diagnose", "--stage", "node", "--bootstrap", b.bootstrap, "--idle-stop", "1"])
    assert rc == 2
    assert "telemetry.train 3" in caplog.text and "same number of partitions" in caplog.text


def test_a_lost_stream_is_said_in_the_operators_log_though_only_recorded(caplog):
    """A whole job's telemetry stopping with nothing on its clock left is recorded (action none, no
    alert): the diagnose log must still say it, or a deployment whose agents all died shows nothing."""
    from faultlens.diagnosis.edge.consumer import diagnosis_record

    lost = Diagnosis(job="llm-70b", ts=100.0, onset=40.0, fault="telemetry_lost", action="none",
                     detail="the stream stopped")
    xid_found = Diagnosis(job="llm-70b", ts=100.0, onset=99.0, fault="gpu_lost", action="evict", nodes=("n1",))
    with caplog.at_level("WARNING", logger="faultlens.diagnosis.edge.consumer"):
        diagnosis_record(xid_found)
        assert not [r for r in caplog.records if r.name == "faultlens.diagnosis.edge.consumer"]
        diagnosis_record(lost)
    assert [r.getMessage() for r in caplog.records if r.name == "faultlens.diagnosis.edge.consumer"] == ["job llm-70b: telemetry lost (none): the stream stopped"]
