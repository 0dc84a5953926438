"""Priming from the compacted `jobs` topic (streams/jobs_topic.py), as both the diagnosis stages
and the remediator do: a tombstone (compaction's delete marker) is a normal record, skipped without a
warning; a record that does not decode is a fault, warned with its offset and counted."""

from __future__ import annotations

import logging

from kafka.consumer.fetcher import ConsumerRecord

from faultlens.diagnosis.edge import consumer as edge_consumer
from faultlens.diagnosis.engine.core import Engine
from faultlens.events.envelope import Envelope, encode
from faultlens.events.topology import Topology
from faultlens.streams import jobs_topic
from faultlens.streams.config import KafkaSettings

EPOCH = 1_700_000_000.0
NODES = [f"n{i:03d}" for i in range(4)]
SETTINGS = KafkaSettings(bootstrap="127.0.0.1:1")


def _record(offset: int, value: bytes | None) -> ConsumerRecord:
    return ConsumerRecord("jobs", 0, 0, offset, 1_700_000_000_000 + offset, 0, b"j", value, [], None, 1, 1, -1)


def _jobs(monkeypatch) -> Topology:
    topology = Topology.grid(NODES, 1, 1, 2, 2)
    records = [
        _record(0, encode(Envelope(ts=EPOCH, job="j", node="-", source="job", kind="start", data={}))),
        _record(1, None),  # job "j"'s earlier topology, deleted: compaction left its tombstone
        _record(2, encode(Envelope(ts=EPOCH + 1, job="j", node="-", source="job", kind="topology", data=topology.to_data()))),
        _record(3, b"{not json"),
    ]
    monkeypatch.setattr(jobs_topic, "iter_topics", lambda *a, **k: iter(records))
    return topology


def _warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_tombstone_is_skipped_quietly_and_a_malformed_record_is_warned_and_counted(monkeypatch, caplog):
    _jobs(monkeypatch)
    seen: list[Envelope] = []
    with caplog.at_level(logging.DEBUG, logger=jobs_topic.__name__):
        read = jobs_topic.prime_from_jobs_topic(SETTINGS, seen.append)
    assert (read.topologies, read.tombstones, read.malformed) == (1, 1, 1)
    assert [e.kind for e in seen] == ["start", "topology"]
    warned = _warned(caplog)
    assert not any("offset 1" in w for w in warned)  # the tombstone: debug only
    assert any("offset 1" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
    assert any("offset 3" in w for w in warned)
    assert any("1 malformed record(s)" in w for w in warned)


def test_a_refused_topology_is_skipped_and_the_read_goes_on(monkeypatch, caplog):
    _jobs(monkeypatch)

    def refuse(event: Envelope) -> None:
        if event.kind == "topology":
            raise ValueError("no such grid")

    read = jobs_topic.prime_from_jobs_topic(SETTINGS, refuse)
    assert (read.topologies, read.malformed) == (0, 2)
    assert any("offset 2: no such grid" in w for w in _warned(caplog))


def test_the_diagnosis_stage_primes_through_it(monkeypatch, caplog):
    topology = _jobs(monkeypatch)
    engine = Engine()
    assert edge_consumer.prime_topologies(engine, SETTINGS) == 1
    assert engine.book.topology("j").nodes == topology.nodes
    assert not any("offset 1" in w for w in _warned(caplog))
