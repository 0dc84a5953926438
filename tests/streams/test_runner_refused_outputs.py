"""An output the client or the broker refuses for good (a diagnosis, command or dead letter over the
size limit) is dead-lettered in a short form and the input offsets commit: read again it would be
made and refused again, a consumer in a loop (streams/runner/delivery.py). Anything else not
acknowledged still makes every partition be read again from its last commit.

Unit tests: the runner's Delivery with the real Producer over a fake client backend (kafka-python's
own error types) and a fake consumer. The real broker and runner are in
test_runner_refused_outputs_broker.py."""

from __future__ import annotations

import logging

import orjson
import pytest
from kafka import errors as kafka_errors
from kafka.structs import TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Outgoing, Producer, Rejected
from faultlens.streams.runner.commit import CommitSchedule
from faultlens.streams.runner.delivery import REFUSED_HEAD_BYTES, Delivery, refused_output
from faultlens.streams.runner.rebalance import RebalanceBook
from faultlens.streams.runner.types import DEAD_LETTER_TOPIC, RunnerStats

LIMIT = 8192
TP = TopicPartition("diagnoses-in", 0)


class Backend:
    """A client that refuses for good every record over ``limit`` bytes and loses every record while
    ``down``."""

    def __init__(self, on_failure, limit: int):
        self.on_failure, self.limit, self.down = on_failure, limit, False
        self.delivered: list[tuple[str, bytes]] = []

    def send(self, topic, key, value, partition=None):
        if len(value) > self.limit:
            raise kafka_errors.MessageSizeTooLargeError(f"{len(value)} bytes")  # kafka-python, in send
        if self.down:
            self.on_failure(topic, kafka_errors.KafkaTimeoutError("batch expired"), value)
        else:
            self.delivered.append((topic, value))

    def flush(self, timeout):
        pass


class Consumer:
    """What Delivery asks of a consumer: its partitions, commits and seeks."""

    def __init__(self):
        self.commits = 0
        self.seeks: list[tuple[TopicPartition, int]] = []

    def assignment(self):
        return {TP}

    def commit(self, offsets=None):
        self.commits += 1

    def committed(self, tp):
        return 40

    def seek(self, tp, offset):
        self.seeks.append((tp, offset))


class Runner(Delivery):
    def __init__(self, producer: Producer):
        self.stats = RunnerStats()
        self.producer = producer
        self.commits = CommitSchedule(0.0)
        self.order = None
        self.rebalance = RebalanceBook(0.0)
        self.group = "diagnose-node"


@pytest.fixture
def rig(monkeypatch):
    backends: list[Backend] = []

    def open_producer(settings, on_failure, **kw):
        backends.append(Backend(on_failure, kw.get("limit", LIMIT)))
        return backends[-1]

    monkeypatch.setattr("faultlens.streams.producer.open_producer", open_producer)
    producer = Producer(KafkaSettings(bootstrap="127.0.0.1:1"))
    return Runner(producer), Consumer(), backends[0]


def diagnosis(i: int, evidence: int = 0) -> Outgoing:
    body = {"job": "j", "fault_class": "xid_error", "node": f"n{i:03d}", "i": i, "evidence": ["e" * 100] * evidence}
    return Outgoing("diagnoses", f"n{i:03d}".encode(), orjson.dumps(body))


def test_a_refused_output_is_dead_lettered_short_and_the_offsets_commit(rig, caplog):
    runner, consumer, backend = rig
    huge = diagnosis(1, evidence=20_000)  # ~2 MB of evidence
    with caplog.at_level(logging.WARNING, logger="faultlens.streams.runner.delivery"):
        assert runner._deliver_and_commit(consumer, {TP: ["read"]}, [diagnosis(0), huge, diagnosis(2)])
    assert [orjson.loads(v)["i"] for t, v in backend.delivered if t == "diagnoses"] == [0, 2]
    [(topic, letter)] = [(t, v) for t, v in backend.delivered if t == DEAD_LETTER_TOPIC]
    body = orjson.loads(letter)
    assert len(letter) < LIMIT and body["size"] == len(huge.value) and body["topic"] == "diagnoses"
    assert body["reason"] == "output refused for good: too large" and body["group"] == "diagnose-node"
    assert body["fields"] == {"job": "j", "fault_class": "xid_error", "node": "n001", "i": 1}
    assert body["truncated"] and body["value"] == huge.value[:REFUSED_HEAD_BYTES].decode()
    assert consumer.commits == 1 and consumer.seeks == []
    assert runner.stats.refused_outputs == 1 and runner.stats.dead_letters == 1 and runner.stats.redeliveries == 0
    said = [r.getMessage() for r in caplog.records if "refused for good" in r.getMessage()]
    assert len(said) == 1 and "diagnoses" in said[0] and f"{len(huge.value)} bytes" in said[0]


def test_a_dead_letter_refused_too_is_let_go_and_the_offsets_commit(rig, caplog):
    runner, consumer, backend = rig
    backend.limit = 100  # under even the short form
    with caplog.at_level(logging.ERROR, logger="faultlens.streams.runner.delivery"):
        assert runner._deliver_and_commit(consumer, {TP: ["read"]}, [diagnosis(1, evidence=5)])
    assert backend.delivered == [] and consumer.commits == 1 and consumer.seeks == []
    assert runner.stats.refused_outputs == 1 and runner.stats.dead_letters == 0
    assert any("were refused too" in r.getMessage() for r in caplog.records)


def test_outputs_lost_with_a_refusal_among_them_are_read_again(rig, monkeypatch):
    """At-least-once is unchanged for all but a refusal: a loss makes every partition be read again."""
    runner, consumer, backend = rig
    monkeypatch.setattr("faultlens.streams.runner.delivery.time.sleep", lambda s: None)
    backend.down = True
    assert not runner._deliver_and_commit(consumer, {TP: ["read"]}, [diagnosis(0), diagnosis(1, evidence=200)])
    assert consumer.commits == 0 and consumer.seeks == [(TP, 40)] and runner.stats.redeliveries == 1
    assert runner.stats.refused_outputs == 0  # counted when it is all that fails, once
    backend.down = False
    assert runner._deliver_and_commit(consumer, {TP: ["read"]}, [diagnosis(0), diagnosis(1, evidence=200)])
    assert consumer.commits == 1 and runner.stats.refused_outputs == 1


def test_the_short_form_of_an_output_that_is_no_json_object():
    letter = refused_output(Rejected("commands", "invalid topic", b"\xff" * 10_000), None)
    body = orjson.loads(letter.value)
    assert letter.topic == DEAD_LETTER_TOPIC and letter.key is None
    assert body["fields"] == {} and body["size"] == 10_000 and body["truncated"]
    assert len(body["value"]) == REFUSED_HEAD_BYTES
