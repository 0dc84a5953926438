"""`faultlens record` keeps the `diagnoses` topic (issue 58: it logged "skipping diagnoses[1]@2:
v: missing" for every one, decoding a diagnosis as an event): beside the trace in
TRACE.diagnoses.jsonl, a re-emitted fold once at its highest count, a malformed record a counted
skip. On the real embedded broker, through the CLI."""

from __future__ import annotations

import json
import uuid

import msgspec
import pytest

from faultlens.cli import main
from faultlens.events import topics
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.trace import diagnoses_path, iter_trace, read_diagnoses
from faultlens.history.loader import load_trace
from faultlens.history.schema import memory_history
from faultlens.history.sink import HistorySink
from faultlens.streams.producer import Producer
from faultlens.streams.record import Recording, RecordStats, write_recording
from tests.diagnosis.diag_events import beat, topology


def _diagnosis(job: str, node: str, ts: float, count: int = 1) -> Diagnosis:
    return Diagnosis(job=job, ts=ts, onset=ts - 5, fault=FaultClass.GPU_LOST, action=Action.EVICT, nodes=(node,),
                     evidence=("xid 79",), detail="fell off the bus", count=count)


@pytest.mark.broker
def test_record_keeps_the_diagnoses_beside_the_trace_and_skips_a_malformed_one(kafka_settings, tmp_path, capsys):
    job = f"job-rd-{uuid.uuid4().hex[:8]}"
    events = [topology(n=2, job=job), beat(1.0, "n000", job=job), beat(2.0, "n001", job=job)]
    first = _diagnosis(job, "n001", events[-1].ts)
    grown = msgspec.structs.replace(first, count=3)  # the engine re-emits a fold under its id
    later = _diagnosis(job, "n000", events[-1].ts + 10)
    with Producer(kafka_settings) as p:
        for e in events:
            p.send_event(e)
        for d in (first, later, grown, first):  # the first again: a redelivery after the fold grew
            p.send(topics.DIAGNOSES, job.encode(), d.encode())
        p.send(topics.DIAGNOSES, job.encode(), b"{not json")
        p.send(topics.DIAGNOSES, job.encode(), json.dumps({"job": job, "fault": "gpu_lost"}).encode())
        p.send(topics.DIAGNOSES, job.encode(), _diagnosis(f"{job}-other", "n009", events[0].ts).encode())
        p.flush()

    out = tmp_path / "rec.parquet"
    assert main(["record", "--topics", topics.JOBS, topics.HEARTBEAT, topics.DIAGNOSES, "--job", job,
                 "--out", str(out), "--idle", "3", "--no-progress", "--bootstrap", kafka_settings.bootstrap]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["events"] == 3 and summary["diagnoses"] == 2
    assert summary["by_topic"][topics.DIAGNOSES] == 2
    assert summary["invalid"] >= 2  # the topic is shared with other tests: at least these two
    assert summary["duplicates"] >= 2 and summary["other_jobs"] >= 1
    assert [e.id for e in iter_trace(out)] == [e.id for e in events]  # rows stay envelopes only
    kept = read_diagnoses(out)
    assert kept == [grown, later]
    assert kept[0].count == 3


def test_a_recording_without_the_diagnoses_topic_leaves_no_stale_diagnoses_file(tmp_path):
    out = tmp_path / "rec.parquet"
    events = [topology(n=2), beat(1.0, "n000")]
    d = _diagnosis(events[0].job, "n000", events[-1].ts)
    write_recording(out, Recording(events, [d], RecordStats()), [topics.HEARTBEAT, topics.DIAGNOSES])
    assert read_diagnoses(out) == [d]
    write_recording(out, Recording(events, [], RecordStats()), [topics.HEARTBEAT, topics.DIAGNOSES])
    assert diagnoses_path(out).exists() and read_diagnoses(out) == []  # recorded, and nothing said
    write_recording(out, Recording(events, [], RecordStats()), [topics.HEARTBEAT])
    assert not diagnoses_path(out).exists()
    assert [e.id for e in iter_trace(out)] == [e.id for e in events]


def test_a_malformed_diagnoses_file_is_a_clear_error(tmp_path):
    out = tmp_path / "rec.parquet"
    diagnoses_path(out).write_text('{"job": "j", "fault": "gpu_lost"}\n')
    with pytest.raises(ValueError, match=r"rec.parquet.diagnoses.jsonl:1: .*missing"):
        read_diagnoses(out)


def test_history_from_a_recording_without_the_engine_stores_what_the_pipeline_said(tmp_path):
    out = tmp_path / "rec.parquet"
    events = [topology(n=2), beat(1.0, "n000"), beat(2.0, "n001")]
    said = [_diagnosis(events[0].job, "n001", events[-1].ts, count=3)]
    write_recording(out, Recording(events, said, RecordStats()), [topics.HEARTBEAT, topics.DIAGNOSES])
    conn = memory_history()
    stats = load_trace(out, HistorySink(conn), diagnose=False, progress=False)
    assert stats.events == 3 and stats.diagnoses == 1
    assert not [n for n in stats.notes if "diagnoses" in n]  # (a recording has no labels: that note stays)
    assert conn.execute("SELECT id, nodes, count FROM diagnoses").fetchall() == [(said[0].id, ["n001"], 3)]

    diagnoses_path(out).write_text("{not json\n")  # a damaged file: a note, the events still stored
    conn = memory_history()
    stats = load_trace(out, HistorySink(conn), diagnose=False, progress=False)
    assert stats.events == 3 and stats.diagnoses == 0
    assert [n for n in stats.notes if "diagnoses" in n][0].startswith("recorded diagnoses not loaded: ")
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 3
